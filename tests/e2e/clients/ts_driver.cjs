// A TypeScript SDK client of the clients × revisions matrix
// (tests/e2e/test_client_matrix.py), driven over stdin/stdout.
//
//   node ts_driver.cjs SDK URL REVISION
//   node ts_driver.cjs SDK --supported
//
// SDK is `ts2` (@modelcontextprotocol/client 2.x) or `ts1`
// (@modelcontextprotocol/sdk 1.x), both found in $VIGIL_CLIENT_MODULES
// (installed by tests/e2e/clients/setup.sh). The client connects to URL
// over streamable HTTP, pinned to protocol REVISION:
//
// - ts2, 2026-07-28: `versionNegotiation: { mode: { pin } }` (server/discover,
//   no session); change notifications through `client.listen()`;
// - ts2, earlier revisions: `supportedProtocolVersions: [REVISION]`, so the
//   `initialize` offers that revision and accepts no other answer;
// - ts1: the SDK always offers its newest revision and has no option for
//   another; the driver rewrites `protocolVersion` in the `initialize`
//   request as the transport sends it (nothing else), and the SDK adopts
//   whatever the server answers: the driver reports it.
//
// With `--supported` the driver prints the revisions the SDK says it speaks,
// `{"handshake": [...], "modern": [...] | null}` (null: the SDK does not
// export that list), and exits.
//
// Protocol: one JSON object per line. First the driver prints
// `{"event": "ready", "sdk", "version", "protocolVersion"}` (or
// `{"event": "failed", "error"}` and exits 1). Then for each command line
// `{"id", "op", ...}` it prints `{"id", ...result}` or `{"id", "error"}`:
//
//   {"op": "list"}                          -> {"tools": [names]}
//   {"op": "call", "name", "arguments"}     -> {"text", "isError"}
//   {"op": "answers", "name", "reply"}      -> {}   what the callbacks answer
//   {"op": "wait_changes", "count", "timeout"} -> {"count"} once at least
//        `count` tools/list_changed arrived (timeout in seconds: an error)
//   {"op": "asked"}                         -> {"elicitations": [messages],
//                                               "samplings": [prompt texts]}
//   {"op": "close"}                         -> {} and exit
//
// The elicitation callback accepts with `{"name": NAME}`; the sampling
// callback replies with the text REPLY (both set by `answers`).
//
// `ready` comes once the client hears the server's notifications: on a
// handshake-era session once the server answered the client's standing GET
// stream with 200 (seen through the transport's `fetch`; a notification
// sent before the stream is open would be lost), on 2026-07-28 once the
// `subscriptions/listen` stream is acknowledged. The wait is bounded by
// $VIGIL_E2E_DEADLINE seconds (default 30).
'use strict';

const fs = require('node:fs');
const path = require('node:path');
const readline = require('node:readline');
const { createRequire } = require('node:module');

const [sdk, url, revision] = process.argv.slice(2);
const modules = process.env.VIGIL_CLIENT_MODULES;
if (!sdk || !url || (!revision && url !== '--supported') || !modules) {
  process.stderr.write('usage: VIGIL_CLIENT_MODULES=DIR node ts_driver.cjs ts1|ts2 URL REVISION | --supported\n');
  process.exit(2);
}
const load = createRequire(path.join(modules, 'package.json'));
const MODERN = '2026-07-28';
const DEADLINE = Number(process.env.VIGIL_E2E_DEADLINE || '30');

// Resolves when a GET to the server gets a 200 (the standing stream).
let streamOpened;
const streamOpen = new Promise((resolve) => {
  streamOpened = resolve;
});
async function watchedFetch(input, init) {
  const response = await fetch(input, init);
  if ((init?.method ?? 'GET') === 'GET' && response.status === 200) streamOpened();
  return response;
}

function standingStream() {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(
      () => reject(new Error(`the session's GET stream was not answered with 200 within ${DEADLINE}s`)),
      DEADLINE * 1000,
    );
    streamOpen.then(() => {
      clearTimeout(timer);
      resolve();
    });
  });
}

const state = {
  name: 'nobody',
  reply: 'nothing',
  changes: 0,
  waiters: [],
  elicitations: [],
  samplings: [],
};

function changed() {
  state.changes += 1;
  for (const w of state.waiters.splice(0)) w();
}

function elicit(params) {
  state.elicitations.push(params.message);
  return { action: 'accept', content: { name: state.name } };
}

function sample(params) {
  const texts = [];
  for (const m of params.messages) {
    for (const block of Array.isArray(m.content) ? m.content : [m.content]) {
      if (block && block.type === 'text') texts.push(block.text);
    }
  }
  state.samplings.push(texts.join(''));
  return { model: 'matrix-model', role: 'assistant', content: { type: 'text', text: state.reply } };
}

function version(pkg) {
  // Not through `load`: the packages' export maps do not export package.json.
  return JSON.parse(fs.readFileSync(path.join(modules, 'node_modules', pkg, 'package.json'), 'utf8')).version;
}

async function connectTs2() {
  const { Client, StreamableHTTPClientTransport } = load('@modelcontextprotocol/client');
  const options = { capabilities: { elicitation: { form: {} }, sampling: {} } };
  if (revision === MODERN) {
    options.versionNegotiation = { mode: { pin: MODERN } };
  } else {
    options.supportedProtocolVersions = [revision];
  }
  const client = new Client({ name: 'vigil-matrix-ts2', version: '1' }, options);
  client.setRequestHandler('elicitation/create', async (request) => elicit(request.params));
  client.setRequestHandler('sampling/createMessage', async (request) => sample(request.params));
  client.setNotificationHandler('notifications/tools/list_changed', async () => changed());
  const transport = new StreamableHTTPClientTransport(new URL(url), { fetch: watchedFetch });
  await client.connect(transport);
  if (client.getProtocolEra() === 'modern') {
    // 2026-07-28 has no standing stream: changes come on a listen stream.
    await client.listen({ toolsListChanged: true });
  } else {
    await standingStream();
  }
  return {
    client,
    sdkVersion: `@modelcontextprotocol/client ${version('@modelcontextprotocol/client')}`,
    negotiated: client.getNegotiatedProtocolVersion(),
    list: async () => (await client.listTools()).tools.map((t) => t.name),
  };
}

async function connectTs1() {
  const { Client } = load('@modelcontextprotocol/sdk/client/index.js');
  const { StreamableHTTPClientTransport } = load('@modelcontextprotocol/sdk/client/streamableHttp.js');
  const types = load('@modelcontextprotocol/sdk/types.js');
  const client = new Client(
    { name: 'vigil-matrix-ts1', version: '1' },
    { capabilities: { elicitation: { form: {} }, sampling: {} } },
  );
  client.setRequestHandler(types.ElicitRequestSchema, async (request) => elicit(request.params));
  client.setRequestHandler(types.CreateMessageRequestSchema, async (request) => sample(request.params));
  client.setNotificationHandler(types.ToolListChangedNotificationSchema, async () => changed());
  const transport = new StreamableHTTPClientTransport(new URL(url), { fetch: watchedFetch });
  const send = transport.send.bind(transport);
  transport.send = (message, options) => {
    if (message && message.method === 'initialize') {
      message = { ...message, params: { ...message.params, protocolVersion: revision } };
    }
    return send(message, options);
  };
  await client.connect(transport);
  await standingStream();
  return {
    client,
    sdkVersion: `@modelcontextprotocol/sdk ${version('@modelcontextprotocol/sdk')}`,
    negotiated: transport.protocolVersion,
    list: async () => {
      const names = [];
      let cursor;
      for (let page = 0; page < 100; page += 1) {
        const result = await client.listTools(cursor ? { cursor } : undefined);
        names.push(...result.tools.map((t) => t.name));
        cursor = result.nextCursor;
        if (!cursor) return names;
      }
      throw new Error('tools/list still paginating after 100 pages');
    },
  };
}

function textOf(result) {
  return (result.content || [])
    .filter((c) => c.type === 'text')
    .map((c) => c.text)
    .join('\n');
}

function waitChanges(count, timeout) {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      reject(new Error(`timed out after ${timeout}s waiting for ${count} tools/list_changed (got ${state.changes})`));
    }, timeout * 1000);
    const check = () => {
      if (state.changes >= count) {
        clearTimeout(timer);
        resolve({ count: state.changes });
      } else {
        state.waiters.push(check);
      }
    };
    check();
  });
}

async function run(conn, command) {
  switch (command.op) {
    case 'list':
      return { tools: await conn.list() };
    case 'call': {
      const result = await conn.client.callTool({ name: command.name, arguments: command.arguments || {} });
      return { text: textOf(result), isError: Boolean(result.isError) };
    }
    case 'answers':
      state.name = command.name;
      state.reply = command.reply;
      return {};
    case 'wait_changes':
      return waitChanges(command.count, command.timeout);
    case 'asked':
      return { elicitations: state.elicitations, samplings: state.samplings };
    case 'close':
      return {};
    default:
      throw new Error(`unknown op ${JSON.stringify(command.op)}`);
  }
}

function print(obj) {
  process.stdout.write(`${JSON.stringify(obj)}\n`);
}

function describe(error) {
  const code = error && error.code !== undefined ? ` (code ${error.code})` : '';
  return `${error && error.name ? error.name : 'Error'}: ${error && error.message ? error.message : error}${code}`;
}

function supported() {
  if (sdk === 'ts2') {
    // 2.x exports its handshake-era list only; its modern list
    // (SUPPORTED_MODERN_PROTOCOL_VERSIONS) stays internal.
    return { handshake: load('@modelcontextprotocol/client').SUPPORTED_PROTOCOL_VERSIONS, modern: null };
  }
  // 1.x knows no revision after the handshake era.
  return { handshake: load('@modelcontextprotocol/sdk/types.js').SUPPORTED_PROTOCOL_VERSIONS, modern: [] };
}

async function main() {
  if (url === '--supported') {
    print(supported());
    process.exit(0);
  }
  let conn;
  try {
    conn = sdk === 'ts2' ? await connectTs2() : sdk === 'ts1' ? await connectTs1() : null;
    if (!conn) throw new Error(`unknown SDK ${sdk}`);
  } catch (error) {
    print({ event: 'failed', error: describe(error) });
    process.exit(1);
  }
  print({ event: 'ready', sdk: conn.sdkVersion, version: revision, protocolVersion: conn.negotiated });
  const lines = readline.createInterface({ input: process.stdin });
  for await (const line of lines) {
    if (!line.trim()) continue;
    const command = JSON.parse(line);
    try {
      print({ id: command.id, ...(await run(conn, command)) });
    } catch (error) {
      print({ id: command.id, error: describe(error) });
    }
    if (command.op === 'close') break;
  }
  await conn.client.close().catch(() => {});
  process.exit(0);
}

main();
