// Wait until an MCP server over streamable HTTP lists a given tool.
//
// usage: node wait-ready.mjs URL TOOL TIMEOUT_SECONDS
//
// Every half second: initialize a session, send `notifications/initialized`,
// call `tools/list`, end the session. Exits 0 once TOOL is listed, 1 when the
// time is up (the last problem goes to stderr). Used by compare.sh so that the
// suite never runs against a gateway that has not yet fetched its backend's
// catalog.

const [url, tool, seconds] = process.argv.slice(2);
if (!url || !tool) {
  console.error('usage: node wait-ready.mjs URL TOOL TIMEOUT_SECONDS');
  process.exit(2);
}
const deadline = Date.now() + Number(seconds ?? 30) * 1000;
const protocolVersion = '2025-11-25';

/** POST one JSON-RPC message; return [response, messages parsed from its body]. */
async function post(session, message) {
  const headers = {
    'content-type': 'application/json',
    accept: 'application/json, text/event-stream'
  };
  if (session) {
    headers['mcp-session-id'] = session;
    headers['mcp-protocol-version'] = protocolVersion;
  }
  const response = await fetch(url, {
    method: 'POST',
    headers,
    body: JSON.stringify(message),
    signal: AbortSignal.timeout(5000)
  });
  const text = await response.text();
  const type = response.headers.get('content-type') ?? '';
  let messages = [];
  if (type.includes('text/event-stream')) {
    messages = text
      .split('\n')
      .filter((line) => line.startsWith('data:'))
      .map((line) => line.slice(5).trim())
      .filter((data) => data.length > 0)
      .map((data) => JSON.parse(data));
  } else if (text.trim().length > 0) {
    messages = [JSON.parse(text)];
  }
  return [response, messages];
}

async function lists() {
  const [init, initMessages] = await post(undefined, {
    jsonrpc: '2.0',
    id: 1,
    method: 'initialize',
    params: {
      protocolVersion,
      capabilities: {},
      clientInfo: { name: 'vigil-conformance-wait-ready', version: '1.0.0' }
    }
  });
  if (!init.ok) throw new Error(`initialize: HTTP ${init.status}`);
  if (!initMessages.some((m) => m.id === 1 && m.result)) throw new Error('initialize: no result');
  const session = init.headers.get('mcp-session-id') ?? undefined;
  try {
    await post(session, { jsonrpc: '2.0', method: 'notifications/initialized' });
    const [list, listMessages] = await post(session, {
      jsonrpc: '2.0',
      id: 2,
      method: 'tools/list',
      params: {}
    });
    if (!list.ok) throw new Error(`tools/list: HTTP ${list.status}`);
    const result = listMessages.find((m) => m.id === 2);
    if (!result?.result) throw new Error(`tools/list: ${JSON.stringify(result?.error ?? 'no result')}`);
    return result.result.tools?.some((t) => t.name === tool) ?? false;
  } finally {
    if (session) {
      await fetch(url, {
        method: 'DELETE',
        headers: { 'mcp-session-id': session, 'mcp-protocol-version': protocolVersion },
        signal: AbortSignal.timeout(5000)
      }).catch(() => {});
    }
  }
}

let problem = 'not tried';
while (Date.now() < deadline) {
  try {
    if (await lists()) process.exit(0);
    problem = `tool ${tool} is not listed yet`;
  } catch (error) {
    problem = error.cause?.message ?? error.message;
  }
  await new Promise((resolve) => setTimeout(resolve, 500));
}
console.error(`${url} is not ready: ${problem}`);
process.exit(1);
