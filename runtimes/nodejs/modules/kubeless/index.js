'use strict';
// Helpers for Kubeless functions on the kubeless-rs Node.js runtime:
//
//   const { Response } = require('kubeless');
//   module.exports.handler = async (event, context) =>
//     new Response({ created: true }, { status: 201, headers: { Location: '/items/1' } });
//
// The body follows the plain return rules: string -> text/plain,
// Buffer/Uint8Array -> application/octet-stream, object/array -> JSON,
// unless the headers name a Content-Type.

class Response {
  constructor(body, options = {}) {
    this.body = body;
    this.status = options.status === undefined ? 200 : Number(options.status);
    this.headers = Object.assign({}, options.headers || {});
  }
}

function response(body, status, headers) {
  return new Response(body, { status, headers });
}

module.exports = { Response, response };
