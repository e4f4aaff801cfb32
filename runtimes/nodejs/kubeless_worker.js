'use strict';
// Node.js worker for the kubeless-rs runtime proxy.
//
// The proxy starts N of these. Each one requires MOD_NAME from the install
// volume, connects to the unix socket in KUBELESS_WORKER_SOCKET and answers
// one framed call at a time: u32 header length, JSON header, u32 body
// length, body. console output goes to the process's stdout/stderr, which
// the proxy passes through to the container log; frames never share them.

const net = require('net');
const { Writable } = require('stream');
const path = require('path');
const Module = require('module');
const { URLSearchParams } = require('url');
const { TextDecoder } = require('util');

// Warm pool standby: started before its function, the worker reads its environment (one JSON
// line) from stdin, then goes on as if started with it.
if (process.env.KUBELESS_WORKER_STANDBY) {
  const fs = require('fs');
  const chunks = [];
  const buf = Buffer.alloc(64 * 1024);
  for (;;) {
    let n;
    try {
      n = fs.readSync(0, buf, 0, buf.length, null);
    } catch (e) {
      if (e.code === 'EAGAIN') continue;
      throw e;
    }
    if (n === 0) break;
    chunks.push(Buffer.from(buf.subarray(0, n)));
    if (buf[n - 1] === 10) break;
  }
  const line = Buffer.concat(chunks).toString('utf8').trim();
  if (!line) process.exit(0);
  Object.assign(process.env, JSON.parse(line));
  delete process.env.KUBELESS_WORKER_STANDBY;
}

const COALESCE = 64 * 1024;
const volume = process.env.KUBELESS_INSTALL_VOLUME || process.cwd();
const modName = process.env.MOD_NAME || '';
const funcName = process.env.FUNC_HANDLER || '';

// Dependencies installed by `kubeless-runtime install` and our `kubeless` helper module.
process.env.NODE_PATH = [path.join(volume, 'node_modules'), path.join(__dirname, 'modules'), process.env.NODE_PATH]
  .filter(Boolean)
  .join(path.delimiter);
Module._initPaths();

const { Response } = require('kubeless');
const utf8 = new TextDecoder('utf-8', { fatal: true });

const context = {
  'function-name': funcName,
  timeout: process.env.FUNC_TIMEOUT || '',
  runtime: process.env.FUNC_RUNTIME || '',
  'memory-limit': process.env.FUNC_MEMORY_LIMIT || '',
};

// The context, plus the call's W3C trace context when it has one.
function callContext(headers) {
  const tp = headers.traceparent;
  if (tp === undefined) return context;
  const ctx = Object.assign({}, context, { traceparent: tp });
  if (headers.tracestate !== undefined) ctx.tracestate = headers.tracestate;
  return ctx;
}

function isJson(ctype) {
  if (!ctype) return false;
  const media = ctype.split(';', 1)[0].trim().toLowerCase();
  return media === 'application/json' || media.endsWith('+json');
}

function encode(value) {
  if (value === undefined || value === null) return [Buffer.alloc(0), null];
  if (typeof value === 'string') return [Buffer.from(value, 'utf8'), 'text/plain; charset=utf-8'];
  if (Buffer.isBuffer(value)) return [value, 'application/octet-stream'];
  if (value instanceof Uint8Array) return [Buffer.from(value.buffer, value.byteOffset, value.byteLength), 'application/octet-stream'];
  if (value instanceof ArrayBuffer) return [Buffer.from(value), 'application/octet-stream'];
  return [Buffer.from(JSON.stringify(value), 'utf8'), 'application/json'];
}

function toResponse(status, headers, value) {
  const [body, ctype] = encode(value);
  const out = [];
  for (const [k, v] of Object.entries(headers || {})) {
    if (Array.isArray(v)) for (const x of v) out.push([String(k), String(x)]);
    else out.push([String(k), String(v)]);
  }
  if (ctype && !out.some(([k]) => k.toLowerCase() === 'content-type')) out.push(['content-type', ctype]);
  return [{ status: Number(status) || 200, headers: out }, body];
}

// An express-like response for functions written against Kubeless's `event.extensions.response`.
// It is also a Writable stream: `readable.pipe(res)`, `res.write(chunk)` and `res.end()` collect
// the body, and the answer goes out when the stream finishes.
class ResponseWriter extends Writable {
  constructor() {
    super();
    this.statusCode = 200;
    this.headers = {};
    this.sent = false;
    this.body = undefined;
    this.streaming = false;
    this.binary = false;
    this.chunks = [];
    this.done = new Promise((resolve) => this.once('finish', resolve));
    this.on('pipe', () => { this.streaming = true; this.binary = true; });
    // e.g. a write after end: log it rather than let it become an uncaught error.
    this.on('error', (err) => console.error('response stream error:', err && err.stack ? err.stack : err));
  }
  status(code) { this.statusCode = code; return this; }
  set(name, value) {
    if (typeof name === 'object') Object.assign(this.headers, name);
    else this.headers[name] = value;
    return this;
  }
  setHeader(name, value) { return this.set(name, value); }
  header(name, value) { return this.set(name, value); }
  get(name) {
    const key = Object.keys(this.headers).find((k) => k.toLowerCase() === String(name).toLowerCase());
    return key === undefined ? undefined : this.headers[key];
  }
  getHeader(name) { return this.get(name); }
  writeHead(code, headers) { this.statusCode = code; if (headers) this.set(headers); return this; }
  send(body) {
    this.body = body; this.sent = true;
    if (!this.writableEnded) super.end();
    return this;
  }
  json(body) { this.set('content-type', 'application/json'); return this.send(JSON.stringify(body)); }
  sendStatus(code) { this.statusCode = code; return this.send(String(code)); }
  noteChunk(chunk) {
    if (chunk !== undefined && chunk !== null && typeof chunk !== 'string') this.binary = true;
  }
  write(chunk, encoding, cb) {
    this.streaming = true;
    this.noteChunk(chunk);
    return super.write(chunk, encoding, cb);
  }
  end(chunk, encoding, cb) {
    if (typeof chunk === 'function') return super.end(chunk);
    this.streaming = true;
    this.noteChunk(chunk);
    if (chunk === undefined || chunk === null) return super.end(encoding, cb);
    return super.end(chunk, encoding, cb);
  }
  _write(chunk, _encoding, cb) { this.chunks.push(chunk); cb(); }
  // The collected body: a string when only strings were written (text/plain), else a Buffer.
  streamed() {
    const all = Buffer.concat(this.chunks);
    return this.binary ? all : all.toString('utf8');
  }
}

function buildRequest(head, body) {
  const headers = {};
  for (const [k, v] of head.headers) headers[k] = k in headers ? `${headers[k]}, ${v}` : v;
  const query = {};
  for (const [k, v] of new URLSearchParams(head.query)) query[k] = v;
  return {
    method: head.method,
    url: head.url,
    originalUrl: head.url,
    path: head.path,
    query,
    headers,
    body,
    ip: head.remote_addr,
    get(name) { return headers[String(name).toLowerCase()]; },
    header(name) { return headers[String(name).toLowerCase()]; },
  };
}

function eventData(headers, body) {
  const ctype = headers['content-type'];
  if (isJson(ctype)) {
    if (body.length === 0) return undefined;
    try { return JSON.parse(body.toString('utf8')); } catch (_) { return body.toString('utf8'); }
  }
  if (ctype && ctype.split(';', 1)[0].trim().toLowerCase() === 'application/octet-stream') return body;
  // Text stays a string like in Kubeless; anything that is not UTF-8 stays raw bytes.
  try { return utf8.decode(body); } catch (_) { return body; }
}

function writeFrame(sock, head, body) {
  const h = Buffer.from(JSON.stringify(head), 'utf8');
  const pre = Buffer.allocUnsafe(8 + h.length);
  pre.writeUInt32BE(h.length, 0);
  h.copy(pre, 4);
  pre.writeUInt32BE(body.length, 4 + h.length);
  if (body.length <= COALESCE) {
    sock.write(body.length ? Buffer.concat([pre, body]) : pre);
  } else {
    sock.cork();
    sock.write(pre);
    sock.write(body);
    sock.uncork();
  }
}

async function invoke(fn, head, body) {
  const req = buildRequest(head, body);
  const res = new ResponseWriter();
  const event = {
    data: eventData(req.headers, body),
    'event-id': req.headers['event-id'],
    'event-type': req.headers['event-type'],
    'event-time': req.headers['event-time'],
    'event-namespace': req.headers['event-namespace'],
    extensions: { request: req, response: res },
  };
  try {
    const result = await fn(event, callContext(req.headers));
    // A function that writes to or pipes into the response is answered when the stream ends.
    if (!res.sent && res.streaming) {
      await res.done;
      return toResponse(res.statusCode, res.headers, res.streamed());
    }
    if (res.sent) return toResponse(res.statusCode, res.headers, res.body);
    if (result instanceof Response) return toResponse(result.status, result.headers, result.body);
    return toResponse(200, {}, result);
  } catch (err) {
    console.error(err && err.stack ? err.stack : err);
    const head = {
      status: 500,
      headers: [['content-type', 'text/plain; charset=utf-8']],
      error: String(err && err.message !== undefined ? `${err.name || 'Error'}: ${err.message}` : err),
    };
    return [head, Buffer.from('Internal Server Error\n')];
  }
}

// Frame reader: collects chunks and cuts exactly-sized pieces, copying each byte once.
class Reader {
  constructor() { this.chunks = []; this.size = 0; }
  push(chunk) { this.chunks.push(chunk); this.size += chunk.length; }
  take(n) {
    if (this.size < n) return null;
    const all = this.chunks.length === 1 ? this.chunks[0] : Buffer.concat(this.chunks, this.size);
    const out = all.subarray(0, n);
    const rest = all.subarray(n);
    this.chunks = rest.length ? [rest] : [];
    this.size = rest.length;
    return out;
  }
}

function main() {
  const sockPath = process.env.KUBELESS_WORKER_SOCKET;
  if (!sockPath) {
    console.error('kubeless worker: KUBELESS_WORKER_SOCKET is not set');
    process.exit(2);
  }
  const sock = net.createConnection(sockPath);
  sock.setNoDelay && sock.setNoDelay(true);
  sock.on('error', (err) => { console.error('kubeless worker: socket error', err); process.exit(1); });
  sock.on('close', () => process.exit(0));

  let fn;
  try {
    const mod = require(path.resolve(volume, modName));
    fn = mod[funcName];
    if (typeof fn !== 'function') throw new TypeError(`${modName}.${funcName} is not a function`);
  } catch (err) {
    console.error(err && err.stack ? err.stack : err);
    writeFrame(sock, { ready: false, error: `cannot load ${modName}.${funcName}: ${err && err.message}` }, Buffer.alloc(0));
    sock.end(() => process.exit(1));
    return;
  }
  const reader = new Reader();
  let state = 0; // 0: header length, 1: header, 2: body length, 3: body, 4: busy
  let need = 4;
  let head = null;
  // After an uncaught error the process state is not trusted (Node's own advice): the call in
  // flight is answered 500 at once and the worker retires; an error between calls retires it
  // after its next answer, so no queued call is lost to the exit.
  let failed = null;
  const onFatal = (kind) => (err) => {
    console.error(`${kind}:`, err && err.stack ? err.stack : err);
    if (failed !== null) return;
    failed = `${kind}: ${err && err.message !== undefined ? `${err.name || 'Error'}: ${err.message}` : String(err)}`;
    if (state === 4) {
      writeFrame(sock, {
        status: 500,
        headers: [['content-type', 'text/plain; charset=utf-8']],
        error: failed,
        retire: true,
      }, Buffer.from('Internal Server Error\n'));
      state = 5; // answered; never read another call
      sock.end(() => process.exit(1));
    }
  };
  process.on('uncaughtException', onFatal('uncaught exception'));
  process.on('unhandledRejection', onFatal('unhandled rejection'));
  writeFrame(sock, { ready: true, pid: process.pid }, Buffer.alloc(0));

  const pump = () => {
    for (;;) {
      if (state >= 4) return;
      const piece = reader.take(need);
      if (piece === null) return;
      if (state === 0) { need = piece.readUInt32BE(0); state = 1; }
      else if (state === 1) { head = JSON.parse(piece.toString('utf8')); need = 4; state = 2; }
      else if (state === 2) { need = piece.readUInt32BE(0); state = 3; }
      else {
        // Copy the body out of the shared chunk so the function may keep it.
        const body = Buffer.from(piece);
        state = 4;
        invoke(fn, head, body).then(([rhead, rbody]) => {
          if (state !== 4) return; // already answered by onFatal
          if (failed !== null) {
            writeFrame(sock, Object.assign({}, rhead, { retire: true }), rbody);
            state = 5;
            sock.end(() => process.exit(1));
            return;
          }
          writeFrame(sock, rhead, rbody);
          state = 0; need = 4; head = null;
          pump();
        });
        return;
      }
      if (need === 0 && state === 3) continue;
    }
  };
  sock.on('data', (chunk) => { reader.push(chunk); pump(); });
}

main();
