module.exports = {
  // Answers with a greeting and echoes the event's data back.
  handler: (event, context) => ({ hello: 'from node', data: event.data, function: context['function-name'] }),
};
