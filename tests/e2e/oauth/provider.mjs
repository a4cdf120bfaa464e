// A real OAuth 2.1 authorization server for Vigil's end-to-end tests: oidc-provider
// configured from a JSON file the test writes (see README.md in this directory).
//
//   node provider.mjs --config FILE [--port N] [--issuer URL]
//
// The modules come from $VIGIL_OAUTH_MODULES (a node_modules directory, default the
// cache that setup.sh installs into). Prints `ready <issuer>` on stdout once it
// listens; everything else goes to stderr. Exits 3 when the port is taken, so the
// caller can retry on another one.
//
// oidc-provider serves its metadata at /.well-known/openid-configuration and at the RFC 8414
// path /.well-known/oauth-authorization-server; with "serve_oauth_metadata": false in the
// config, the latter answers 404. Beside its routes, the same port serves:
//   POST /_test/keys       {"keys": [private JWK, ...]}: replace the signing keys (the
//                           first key of each algorithm signs; every key is published in
//                           the JWKS)
//   POST /_test/resources  {"resource": URL, "scope": "mcp", ...}: add (or replace) a
//                           resource server, same fields as "resources" in the config
//   GET  /_test/state      {"kids": [...], "resources": [...], "generation": N}
// A change builds a new Provider object with the new configuration and routes the next
// requests to it, on the same port, without a restart. Tokens, grants, sessions,
// interactions and dynamically registered clients survive: they live in one in-memory
// store for the whole process (SharedMemoryAdapter below).

import { readFileSync } from 'node:fs';
import * as http from 'node:http';
import { homedir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { pathToFileURL } from 'node:url';
import { randomBytes } from 'node:crypto';

const EXIT_PORT_TAKEN = 3;
const TOKEN_EXCHANGE = 'urn:ietf:params:oauth:grant-type:token-exchange';
const ACCESS_TOKEN_TYPE = 'urn:ietf:params:oauth:token-type:access_token';
const JWT_TOKEN_TYPE = 'urn:ietf:params:oauth:token-type:jwt';

function fail(message) {
  process.stderr.write(`provider.mjs: ${message}\n`);
  process.exit(2);
}

const { values: args } = parseArgs({
  options: {
    config: { type: 'string' },
    port: { type: 'string' },
    issuer: { type: 'string' },
  },
});
if (!args.config) fail('usage: node provider.mjs --config FILE [--port N] [--issuer URL]');

let config;
try {
  config = JSON.parse(readFileSync(args.config, 'utf8'));
} catch (err) {
  fail(`cannot read config ${args.config}: ${err.message}`);
}
const port = Number(args.port ?? config.port);
const issuer = args.issuer ?? config.issuer ?? `http://127.0.0.1:${port}`;
if (!Number.isInteger(port) || port <= 0) fail('no port: give --port or "port" in the config');

// --- modules, from a node_modules directory outside the clone ---

const modules = process.env.VIGIL_OAUTH_MODULES || join(homedir(), '.cache', 'vigil', 'oauth-provider', 'node_modules');

async function importPackage(name) {
  const dir = join(modules, name);
  let manifest;
  try {
    manifest = JSON.parse(readFileSync(join(dir, 'package.json'), 'utf8'));
  } catch {
    fail(`${name} not found in ${modules}: run tests/e2e/oauth/setup.sh (or set VIGIL_OAUTH_MODULES)`);
  }
  let entry = manifest.exports?.['.'] ?? manifest.exports ?? manifest.main ?? 'index.js';
  while (entry && typeof entry === 'object') entry = entry.import ?? entry.default;
  return import(pathToFileURL(join(dir, entry)).href);
}

const { Provider, errors } = await importPackage('oidc-provider');
const jose = await importPackage('jose');

// --- storage shared by every Provider object of this process ---

// oidc-provider's own memory adapter keeps one store per Provider object, so a provider
// rebuilt with new keys would forget every token, grant, session and registered client.
// This one keeps a single store for the process (what lets a rotation keep state).
const store = new Map(); // key -> { value, expiresAt (ms) | undefined }
const grantMembers = new Map(); // grantId -> Set of keys

function load(key) {
  const entry = store.get(key);
  if (!entry) return undefined;
  if (entry.expiresAt !== undefined && entry.expiresAt <= Date.now()) {
    store.delete(key);
    return undefined;
  }
  return entry.value;
}

class SharedMemoryAdapter {
  constructor(model) {
    this.model = model;
  }

  key(id) {
    return `${this.model}:${id}`;
  }

  async upsert(id, payload, expiresIn) {
    const key = this.key(id);
    const expiresAt = expiresIn ? Date.now() + expiresIn * 1000 : undefined;
    store.set(key, { value: payload, expiresAt });
    if (payload.grantId) {
      if (!grantMembers.has(payload.grantId)) grantMembers.set(payload.grantId, new Set());
      grantMembers.get(payload.grantId).add(key);
    }
    if (this.model === 'Session' && payload.uid) store.set(`sessionUid:${payload.uid}`, { value: id, expiresAt });
    if (payload.userCode) store.set(`userCode:${payload.userCode}`, { value: id, expiresAt });
  }

  async find(id) {
    return load(this.key(id));
  }

  async findByUid(uid) {
    const id = load(`sessionUid:${uid}`);
    return id === undefined ? undefined : this.find(id);
  }

  async findByUserCode(userCode) {
    const id = load(`userCode:${userCode}`);
    return id === undefined ? undefined : this.find(id);
  }

  async consume(id) {
    const value = load(this.key(id));
    if (value) value.consumed = Math.floor(Date.now() / 1000);
  }

  async destroy(id) {
    store.delete(this.key(id));
  }

  async revokeByGrantId(grantId) {
    for (const key of grantMembers.get(grantId) ?? []) store.delete(key);
    grantMembers.delete(grantId);
  }
}

// --- the parts of the config the provider's callbacks read ---

const resources = new Map();
function addResource(r) {
  if (typeof r?.resource !== 'string' || !URL.canParse(r.resource)) throw new Error('a resource needs "resource": an absolute URL');
  resources.set(r.resource, r);
}
for (const r of config.resources ?? []) addResource(r);
const accounts = config.accounts ?? {};
// Per-client extras (not client metadata): groups and claims for client_credentials tokens.
const clientExtras = new Map();
const clients = (config.clients ?? []).map((c) => {
  const { groups, claims, ...metadata } = c;
  clientExtras.set(c.client_id, { groups, claims });
  return metadata;
});
const cookieKeys = [randomBytes(32).toString('base64url')];

function resourceServerInfo(resource) {
  const r = resources.get(resource);
  if (!r) return undefined;
  const format = r.format ?? 'jwt';
  return {
    scope: r.scope ?? 'mcp',
    audience: r.audience ?? r.resource,
    accessTokenTTL: r.ttl ?? config.access_token_ttl ?? 600,
    accessTokenFormat: format,
    ...(format === 'jwt' ? { jwt: { sign: { alg: r.alg ?? 'RS256' } } } : {}),
  };
}

function extrasFor(who) {
  if (!who) return undefined;
  const out = { ...(who.claims ?? {}) };
  if (who.groups !== undefined) out.groups = who.groups;
  return Object.keys(out).length ? out : undefined;
}

// Tokens minted by the token exchange carry the claims taken from their subject token.
const exchanged = new WeakMap();

// The groups (and extra claims) of the account behind a token, or of the client for
// client_credentials tokens.
function extraClaimsFor(token) {
  if (exchanged.has(token)) return exchanged.get(token);
  if (token.kind === 'ClientCredentials') return extrasFor(clientExtras.get(token.clientId));
  return extrasFor(accounts[token.accountId]) ?? extrasFor(clientExtras.get(token.clientId));
}

function configuration(jwks) {
  return {
    adapter: SharedMemoryAdapter,
    clients,
    jwks: { keys: jwks },
    cookies: { keys: cookieKeys },
    responseTypes: ['code'],
    scopes: ['openid', 'offline_access', ...new Set([...resources.values()].flatMap((r) => (r.scope ?? 'mcp').split(' ')))],
    findAccount(ctx, sub) {
      return {
        accountId: sub,
        async claims() {
          return { sub, ...(accounts[sub]?.groups ? { groups: accounts[sub].groups } : {}) };
        },
      };
    },
    async extraTokenClaims(ctx, token) {
      return extraClaimsFor(token);
    },
    // Every code-flow client allowed the grant gets a refresh token, with or without
    // offline_access in the scope (the default asks for offline_access).
    async issueRefreshToken(ctx, client) {
      return client.grantTypeAllowed('refresh_token');
    },
    features: {
      devInteractions: { enabled: true },
      clientCredentials: { enabled: true },
      registration: { enabled: true, initialAccessToken: false, issueRegistrationAccessToken: true },
      introspection: { enabled: true },
      revocation: { enabled: true },
      resourceIndicators: {
        enabled: true,
        async defaultResource(ctx, client, oneOf) {
          return oneOf ?? config.default_resource;
        },
        // A refresh or code exchange without `resource` gets a token for the one granted.
        async useGrantedResource() {
          return true;
        },
        async getResourceServerInfo(ctx, resource) {
          const info = resourceServerInfo(resource);
          if (!info) throw new errors.InvalidTarget(`unknown resource ${resource}`);
          return info;
        },
      },
    },
    pkce: { required: () => true },
    ttl: {
      AccessToken: (ctx, token) => token.resourceServer?.accessTokenTTL ?? config.access_token_ttl ?? 600,
      ClientCredentials: (ctx, token) => token.resourceServer?.accessTokenTTL ?? config.access_token_ttl ?? 600,
      RefreshToken: config.refresh_token_ttl ?? 3600,
      Interaction: 600,
      Session: 3600,
      Grant: 3600,
      IdToken: 600,
    },
    enabledJWA: {
      idTokenSigningAlgValues: ['RS256', 'ES256'],
    },
    renderError(ctx, out) {
      ctx.type = 'json';
      ctx.body = out;
    },
  };
}

// --- RFC 8693 token exchange: a JWT for another resource, given one of ours ---

let currentKeys = config.keys ?? [];

async function tokenExchange(ctx) {
  const { params, client, provider } = ctx.oidc;
  if (!params.subject_token) throw new errors.InvalidRequest('missing required parameter subject_token');
  if (![ACCESS_TOKEN_TYPE, JWT_TOKEN_TYPE].includes(params.subject_token_type)) {
    throw new errors.InvalidRequest('unsupported subject_token_type');
  }
  const resource = params.resource ?? params.audience;
  const info = resource && resourceServerInfo(resource);
  if (!info) throw new errors.InvalidTarget('resource (or audience) must name a configured resource');

  let claims;
  try {
    const publicKeys = currentKeys.map(({ d, p, q, dp, dq, qi, key_ops, ...pub }) => pub);
    ({ payload: claims } = await jose.jwtVerify(params.subject_token, jose.createLocalJWKSet({ keys: publicKeys }), {
      issuer: provider.issuer,
      typ: 'at+jwt',
    }));
  } catch (err) {
    throw new errors.InvalidGrant(`subject_token rejected: ${err.message}`);
  }

  const offered = new Set(String(claims.scope ?? '').split(' ').filter(Boolean));
  const requested = params.scope ? params.scope.split(' ') : [...offered];
  const allowed = new Set(info.scope.split(' '));
  const scope = requested.filter((s) => offered.has(s) && allowed.has(s));
  if (params.scope && scope.length !== requested.length) {
    throw new errors.InvalidScope('scope must be within the subject_token\'s scope and the resource\'s');
  }

  const token = new provider.ClientCredentials({ client, scope: scope.join(' ') || undefined });
  token.resourceServer = new provider.ResourceServer(resource, info);
  exchanged.set(token, {
    ...(claims.groups !== undefined ? { groups: claims.groups } : {}),
    subject: claims.sub,
    act: { sub: client.clientId },
  });
  ctx.oidc.entity('ClientCredentials', token);
  const value = await token.save();
  ctx.body = {
    access_token: value,
    issued_token_type: ACCESS_TOKEN_TYPE,
    token_type: 'Bearer',
    expires_in: token.expiration,
    ...(token.scope ? { scope: token.scope } : {}),
  };
}

// --- the provider object, replaced in place when the keys change ---

let generation = 0;
let handler;

function makeProvider(jwks) {
  const p = new Provider(issuer, configuration(jwks));
  p.registerGrantType(TOKEN_EXCHANGE, tokenExchange, [
    'audience', 'resource', 'scope', 'requested_token_type',
    'subject_token', 'subject_token_type', 'actor_token', 'actor_token_type',
  ]);
  p.on('server_error', (ctx, err) => process.stderr.write(`server_error: ${err.stack}\n`));
  for (const event of ['grant.error', 'authorization.error', 'registration_create.error', 'introspection.error']) {
    p.on(event, (ctx, err) => {
      const detail = [err.error_description, err.error_detail].filter(Boolean).join(': ');
      process.stderr.write(`${event}: ${err.message}${detail ? ` (${detail})` : ''}\n`);
    });
  }
  currentKeys = jwks;
  generation += 1;
  return p;
}

try {
  handler = makeProvider(currentKeys).callback();
} catch (err) {
  fail(`invalid configuration: ${err.stack}`);
}

function readJson(req) {
  return new Promise((resolve, reject) => {
    const chunks = [];
    let size = 0;
    req.on('data', (c) => {
      size += c.length;
      if (size > 1 << 20) reject(new Error('body over 1 MiB'));
      else chunks.push(c);
    });
    req.on('end', () => {
      try {
        resolve(JSON.parse(Buffer.concat(chunks).toString('utf8') || '{}'));
      } catch (err) {
        reject(err);
      }
    });
    req.on('error', reject);
  });
}

function send(res, status, body) {
  res.writeHead(status, { 'content-type': 'application/json', 'cache-control': 'no-store' });
  res.end(JSON.stringify(body));
}

function state() {
  return { kids: currentKeys.map((k) => k.kid), resources: [...resources.keys()], generation };
}

async function testRoute(req, res) {
  const path = req.url.split('?')[0];
  if (path === '/_test/state' && req.method === 'GET') return send(res, 200, state());
  if (req.method !== 'POST' || !['/_test/keys', '/_test/resources'].includes(path)) {
    return send(res, 404, { error: `no test route ${req.method} ${path}` });
  }
  let body;
  try {
    body = await readJson(req);
  } catch (err) {
    return send(res, 400, { error: `bad JSON body: ${err.message}` });
  }
  const keys = currentKeys;
  const before = new Map(resources);
  try {
    if (path === '/_test/keys') {
      if (!Array.isArray(body.keys) || body.keys.length === 0) throw new Error('body needs "keys": [JWK, ...]');
      handler = makeProvider(body.keys).callback();
    } else {
      addResource(body);
      handler = makeProvider(currentKeys).callback();
    }
  } catch (err) {
    currentKeys = keys;
    resources.clear();
    for (const [k, v] of before) resources.set(k, v);
    return send(res, 400, { error: `refused: ${err.message}` });
  }
  process.stderr.write(`provider rebuilt (generation ${generation}): keys ${currentKeys.map((k) => k.kid).join(', ')}; resources ${[...resources.keys()].join(', ')}\n`);
  return send(res, 200, state());
}

const server = http.createServer((req, res) => {
  if (req.url.startsWith('/_test/')) {
    testRoute(req, res).catch((err) => {
      process.stderr.write(`test route failed: ${err.stack}\n`);
      if (!res.headersSent) send(res, 500, { error: err.message });
    });
    return;
  }
  // oidc-provider serves its metadata at both well-known paths; hiding the RFC 8414 one
  // leaves a client only the OpenID Connect discovery path.
  if (config.serve_oauth_metadata === false && req.url.split('?')[0] === '/.well-known/oauth-authorization-server') {
    return send(res, 404, { error: 'not served: serve_oauth_metadata is false' });
  }
  handler(req, res);
});

server.on('error', (err) => {
  if (err.code === 'EADDRINUSE') {
    process.stderr.write(`provider.mjs: port ${port} is taken\n`);
    process.exit(EXIT_PORT_TAKEN);
  }
  fail(`server error: ${err.stack}`);
});

for (const signal of ['SIGTERM', 'SIGINT']) {
  process.on(signal, () => process.exit(0));
}

server.listen(port, '127.0.0.1', () => {
  process.stdout.write(`ready ${issuer}\n`);
});
