// runtime: nodejs20
module.exports = {
  // Answers with a greeting and echoes the event's data back.
  handler: (event, context) => ({
    hello: 'from node',
    // A GET or a plain-text body may arrive as a Buffer: send it as text.
    data: Buffer.isBuffer(event.data) ? event.data.toString('utf8') : event.data,
    function: context['function-name'],
  }),
};
