"use strict";
// Vigil dashboard.
//
// Everything live comes from one stream, GET /api/v1/events (server-sent
// events). EventSource cannot send an Authorization header, so the stream is
// read with fetch() and parsed here. A `hello` event is a full snapshot,
// later events are changes. Operator actions are plain POSTs whose answer
// (the backend's new report, or its update) is applied at once. The one
// poll: a backend's update is read when a transition says one started or
// ended, and every UPDATE_POLL_MS while it is in progress (its held and
// baking phases make no transition).
//
// Sections: 1 state and helpers · 2 token · 3 stream and SSE parser ·
// 4 event handlers · 5 backend cards · 6 summary and plugins ·
// 7 operator actions · 8 start-up.

(() => {
  // === 1. State and helpers ===

  const TOKEN_KEY = "vigil-token";
  const DEFAULT_RETRY_MS = 2000;
  const MAX_TIMELINE = 50; // transitions kept in the DOM per backend
  const DEFAULT_QUARANTINE_REASON = "from the dashboard"; // the API appends "(by <principal>)"
  const UPDATE_POLL_MS = 1500; // how often an update in progress is read
  const UPDATE_DECIDED_MS = 250; // the first read after an approve or abort

  // An update's states while it is in progress (the others are final).
  const UPDATE_RUNNING = new Set(["starting", "held", "baking"]);

  // Actions whose API path or button text is not their name.
  const ACTION_PATH = { "approve-update": "update/approve", "abort-update": "update/abort" };
  const ACTION_LABEL = { "approve-update": "approve update", "abort-update": "abort update" };

  // Which summary count each health state adds to.
  const BUCKET = {
    running: "running",
    degraded: "degraded",
    offline: "down",
    restarting: "down",
    quarantined: "quarantined",
    starting: "other",
    updating: "other",
    unknown: "other",
  };

  const $ = (selector, root = document) => root.querySelector(selector);

  const state = {
    token: null,
    principal: null,
    role: null,
    reports: new Map(), // backend name → its latest InstanceReport
    cards: new Map(), // backend name → card (see createCard)
    counts: emptyCounts(),
    retryMs: DEFAULT_RETRY_MS, // from the stream's `retry:` field
    lastEventId: null, // kept for debugging only: a reconnect gets a fresh hello
    stream: null, // AbortController of the open stream, if any
    reconnectTimer: null,
  };

  // Page elements, looked up once.
  const el = {
    conn: $("#conn"),
    who: $("#who"),
    principal: $("#principal"),
    role: $("#role"),
    changeToken: $("#change-token"),
    tokenForm: $("#token-form"),
    tokenInput: $("#token-input"),
    tokenMessage: $("#token-message"),
    summary: $("#summary"),
    filter: $("#filter"),
    backends: $("#backends"),
    backendsEmpty: $("#backends-empty"),
    template: $("#backend-template"),
    plugins: $("#plugins"),
    pluginsStatus: $("#plugins-status"),
    warnings: $("#warnings"),
  };

  function emptyCounts() {
    return { total: 0, running: 0, degraded: 0, down: 0, quarantined: 0, other: 0 };
  }

  // Plain code-unit order (names are ASCII), as Rust's or Python's sort gives.
  function byName(a, b) {
    return a < b ? -1 : a > b ? 1 : 0;
  }

  // A coarse duration ("42s", "5m", "3h 5m", "2d 4h"): coarse so that most
  // "for …" labels change rarely and the 1 s tick touches little of the DOM.
  function formatDuration(ms) {
    const s = Math.max(0, Math.round(ms / 1000));
    if (s < 60) return `${s}s`;
    const m = Math.floor(s / 60);
    if (m < 60) return `${m}m`;
    const h = Math.floor(m / 60);
    if (h < 24) return `${h}h ${m % 60}m`;
    return `${Math.floor(h / 24)}d ${h % 24}h`;
  }

  // Time of day for today, date and time otherwise.
  function formatClock(unixMs) {
    const d = new Date(unixMs);
    const today = new Date().toDateString() === d.toDateString();
    return today ? d.toLocaleTimeString() : d.toLocaleString();
  }

  function setText(node, text) {
    // Skip equal writes: no needless layout work at 1,000 backends.
    if (node.textContent !== text) node.textContent = text;
  }

  // `#conn` shows where the stream stands; `data-conn` is for CSS and tests.
  function setConn(kind, text, detail = "") {
    el.conn.dataset.conn = kind;
    setText(el.conn, text);
    el.conn.title = detail;
    document.body.classList.toggle("stale", kind !== "live");
  }

  // === 2. Token ===

  // Order: a `#token=…` fragment (then removed from the address bar so it
  // does not linger in history or screenshots), else this tab's storage.
  function tokenFromFragment() {
    // Not URLSearchParams: it would turn a "+" in the token into a space.
    const match = /(?:^#|&)token=([^&]*)/.exec(location.hash);
    if (!match) return null;
    history.replaceState(null, "", location.pathname + location.search);
    try {
      return decodeURIComponent(match[1]).trim() || null;
    } catch (_) {
      return match[1].trim() || null; // not valid percent-encoding: take it as is
    }
  }

  function setToken(token) {
    state.token = token;
    if (token) sessionStorage.setItem(TOKEN_KEY, token);
    else sessionStorage.removeItem(TOKEN_KEY);
  }

  function authHeaders(extra = {}) {
    // No token: the gateway may be in loopback mode, where none is needed.
    return state.token ? { ...extra, Authorization: `Bearer ${state.token}` } : extra;
  }

  // Stops the stream and shows the token form with the gateway's reason.
  function askForToken(message) {
    stopStream();
    clearData();
    setConn("token", "token needed", message);
    setText(el.tokenMessage, message);
    el.tokenForm.hidden = false;
    el.changeToken.hidden = true;
    el.tokenInput.focus();
  }

  el.tokenForm.addEventListener("submit", (event) => {
    event.preventDefault(); // never navigate (the CSP has form-action 'none')
    const token = el.tokenInput.value.trim();
    if (!token) return;
    setToken(token);
    el.tokenInput.value = "";
    el.tokenForm.hidden = true;
    connect();
  });

  el.changeToken.addEventListener("click", () => {
    setToken(null);
    askForToken("Enter an API token.");
  });

  // A `#token=…` pasted into an open tab changes only the fragment.
  window.addEventListener("hashchange", () => {
    const token = tokenFromFragment();
    if (token) {
      setToken(token);
      el.tokenForm.hidden = true;
      connect();
    }
  });

  // The API's `{"error": {"code", "message"}}`, or the HTTP status.
  async function errorMessage(response) {
    try {
      const body = await response.json();
      if (body && body.error && body.error.message) return body.error.message;
    } catch (_) {
      // not JSON: fall through
    }
    return `HTTP ${response.status} ${response.statusText}`.trim();
  }

  // === 3. Stream and SSE parser ===

  function stopStream() {
    clearTimeout(state.reconnectTimer);
    state.reconnectTimer = null;
    if (state.stream) state.stream.abort();
    state.stream = null;
  }

  function reconnectLater(why) {
    const delay = Math.max(state.retryMs, 250); // never a tight loop, whatever `retry:` said
    setConn("reconnecting", "reconnecting…", `${why}; retrying every ${delay / 1000}s`);
    clearTimeout(state.reconnectTimer);
    state.reconnectTimer = setTimeout(connect, delay);
  }

  async function connect() {
    stopStream();
    const controller = new AbortController();
    state.stream = controller;
    const current = () => state.stream === controller; // false once replaced or stopped

    let response;
    try {
      response = await fetch("/api/v1/events", {
        headers: authHeaders({ Accept: "text/event-stream" }),
        cache: "no-store",
        signal: controller.signal,
      });
    } catch (_) {
      if (current()) reconnectLater("cannot reach the gateway");
      return;
    }
    if (!current()) return;
    if (response.status === 401) {
      const message = await errorMessage(response);
      if (state.token) setToken(null); // a refused token is of no further use
      askForToken(`The gateway wants a valid token: ${message}`);
      return;
    }
    if (!response.ok) {
      reconnectLater(await errorMessage(response));
      return;
    }

    const feed = sseParser(dispatch);
    const reader = response.body.getReader();
    const decoder = new TextDecoder();
    try {
      for (;;) {
        const { value, done } = await reader.read();
        if (done || !current()) break;
        feed(decoder.decode(value, { stream: true }));
        renderSummary(); // once per network read, not once per event
      }
    } catch (_) {
      // network error or abort: handled below
    }
    if (current()) reconnectLater("the stream ended");
  }

  // Returns feed(text), to be called with each decoded chunk; calls
  // onEvent(type, data) for each complete event (WHATWG event-stream rules).
  function sseParser(onEvent) {
    let buffer = "";
    let type = "";
    let data = [];
    return (chunk) => {
      buffer += chunk;
      // A chunk may end between "\r" and "\n": keep a trailing "\r" for later.
      const end = buffer.endsWith("\r") ? buffer.length - 1 : buffer.length;
      const lines = buffer.slice(0, end).split(/\r\n|\r|\n/);
      buffer = lines.pop() + buffer.slice(end); // the unfinished last line
      for (const line of lines) {
        if (line === "") {
          // A blank line ends the event.
          if (data.length > 0) onEvent(type || "message", data.join("\n"));
          type = "";
          data = [];
          continue;
        }
        if (line.startsWith(":")) continue; // comment: the server's keep-alive
        const colon = line.indexOf(":");
        const field = colon < 0 ? line : line.slice(0, colon);
        let value = colon < 0 ? "" : line.slice(colon + 1);
        if (value.startsWith(" ")) value = value.slice(1);
        if (field === "event") type = value;
        else if (field === "data") data.push(value);
        else if (field === "id" && !value.includes("\0")) state.lastEventId = value;
        else if (field === "retry" && /^\d+$/.test(value)) state.retryMs = Number(value);
      }
    };
  }

  // === 4. Event handlers ===

  const handlers = new Map([
    ["hello", onHello],
    ["transition", onTransition],
    ["instances", onInstances],
    ["plugins", renderPlugins],
    ["warnings", ({ warnings }) => renderWarnings(warnings)],
  ]);

  function dispatch(type, data) {
    const handler = handlers.get(type);
    if (!handler) return; // an event this page does not know (a newer gateway)
    try {
      handler(JSON.parse(data));
    } catch (err) {
      // One bad event must not end the stream.
      console.error(`vigil: cannot handle the ${type} event`, err);
    }
  }

  // A full snapshot: drop everything held and build again. Comes first on
  // every stream, and again if this client fell behind.
  function onHello(hello) {
    state.principal = hello.principal;
    state.role = hello.role;
    setText(el.principal, hello.principal);
    setText(el.role, hello.role);
    el.role.dataset.role = hello.role;
    document.body.dataset.role = hello.role;
    el.who.hidden = false;
    el.changeToken.hidden = false;
    el.tokenForm.hidden = true;

    clearBackends();
    const reports = [...hello.instances].sort((a, b) => byName(a.name, b.name));
    const transitions = hello.transitions || {};
    const fragment = document.createDocumentFragment(); // one insertion, one layout
    for (const report of reports) {
      const card = createCard(report.name);
      state.cards.set(report.name, card);
      setReport(card, report);
      // hasOwn: a backend may be called "constructor".
      const recent = Object.hasOwn(transitions, report.name) ? transitions[report.name] : [];
      for (const t of recent) appendTransition(card, t);
      // Only where an update shows: reading every backend's would cost a
      // request per backend on every (re)connect.
      if (report.state === "updating" || recent.some(touchesUpdate)) readUpdate(card);
      fragment.append(card.el);
    }
    el.backends.append(fragment);
    el.backendsEmpty.hidden = reports.length > 0;
    renderPlugins(hello.plugins || { dir: null, plugins: [] });
    renderWarnings(hello.warnings || []);
    setConn("live", "live");
  }

  function onTransition({ transition, instance }) {
    if (instance) upsertReport(instance);
    const card = state.cards.get(transition.backend);
    if (!card) return;
    appendTransition(card, transition);
    if (touchesUpdate(transition) || updateRunning(card.updateRecord)) readUpdate(card);
  }

  // What an operator should know (replicas serving another configuration,
  // clients sharing a backend session): the whole list, as text.
  function renderWarnings(warnings) {
    el.warnings.replaceChildren(
      ...warnings.map((text) => {
        const li = document.createElement("li");
        li.textContent = text;
        return li;
      }),
    );
    el.warnings.hidden = warnings.length === 0;
  }

  function onInstances({ instances }) {
    for (const report of instances) upsertReport(report);
  }

  function clearBackends() {
    for (const card of state.cards.values()) forgetUpdate(card);
    state.reports.clear();
    state.cards.clear();
    state.counts = emptyCounts();
    el.backends.replaceChildren();
  }

  // Forgets all data, e.g. when the token is refused or changed.
  function clearData() {
    clearBackends();
    state.principal = null;
    state.role = null;
    delete document.body.dataset.role;
    el.who.hidden = true;
    el.backendsEmpty.hidden = true;
    renderPlugins(null);
    renderSummary();
  }

  // === 5. Backend cards ===

  // A card is the element plus references to the parts that change.
  function createCard(name) {
    const root = el.template.content.firstElementChild.cloneNode(true);
    root.dataset.backend = name;
    const card = {
      name,
      el: root,
      state: $(".state", root),
      runtime: $(".runtime", root),
      since: $(".since", root),
      latency: $(".latency", root),
      errorRate: $(".error-rate", root),
      restarts: $(".restarts", root),
      retryRow: $(".retry-row", root),
      nextRetry: $(".next-retry", root),
      quarantineLine: $(".quarantine-line", root),
      quarantineReason: $(".quarantine-reason", root),
      withheld: $(".withheld", root),
      withheldCount: $(".withheld-count", root),
      withheldList: $(".withheld-list", root),
      withheldShown: null, // the count the list was read for
      withheldDigests: [], // what an approval names: the digests shown
      update: $(".update", root),
      updateTitle: $(".update-title", root),
      updateOutcome: $(".update-outcome", root),
      updateFrom: $(".update-from", root),
      updateTo: $(".update-to", root),
      updateMeta: $(".update-meta", root),
      updateDiff: $(".update-diff", root),
      updateRecord: null, // the update shown (GET …/update), if any
      updateSeq: 0, // bumped per read or answer: only the latest is applied
      updateTimer: null, // the next read while an update is in progress
      updateDecision: null, // {id, action}: an approve or abort sent from here
      reason: $(".reason", root),
      actions: $(".actions", root),
      actionError: $(".action-error", root),
      timeline: $(".timeline", root),
      actionsKey: null, // which buttons are shown, to rebuild them only on change
      busy: false,
    };
    const title = $(".name", root);
    title.textContent = name;
    title.id = `backend-${cssSafe(name)}`;
    root.setAttribute("aria-labelledby", title.id);
    return card;
  }

  // Backend names are letters, digits, "-" and "_"; anything else is replaced
  // so the id stays valid.
  function cssSafe(name) {
    return name.replace(/[^A-Za-z0-9_-]/g, "_");
  }

  // Applies a report from any source (event or action answer), creating the
  // card of a backend seen for the first time (added by a config reload).
  function upsertReport(report) {
    let card = state.cards.get(report.name);
    if (!card) {
      card = createCard(report.name);
      state.cards.set(report.name, card);
      insertSorted(card);
      el.backendsEmpty.hidden = true;
    }
    setReport(card, report);
  }

  function insertSorted(card) {
    for (const other of el.backends.children) {
      if (byName(card.name, other.dataset.backend) < 0) {
        el.backends.insertBefore(card.el, other);
        return;
      }
    }
    el.backends.append(card.el);
  }

  function setReport(card, report) {
    const previous = state.reports.get(report.name);
    if (previous) state.counts[BUCKET[previous.state] || "other"] -= 1;
    else state.counts.total += 1;
    state.counts[BUCKET[report.state] || "other"] += 1;
    state.reports.set(report.name, report);
    renderCard(card, report);
  }

  function renderCard(card, r) {
    card.state.dataset.state = r.state;
    setText(card.state, r.state);
    setText(card.runtime, r.runtime);
    card.since.title = `${r.state} since ${new Date(r.since).toLocaleString()}`;
    setText(card.latency, r.latency_ms == null ? "—" : `${r.latency_ms.toFixed(1)} ms`);
    const rate = r.error_rate == null ? "—" : `${(r.error_rate * 100).toFixed(1)}%`;
    const calls = `${r.calls_in_window} call${r.calls_in_window === 1 ? "" : "s"}`;
    setText(card.errorRate, `${rate} (${calls})`);
    const failing = r.consecutive_failures > 0 ? ` (${r.consecutive_failures} failed in a row)` : "";
    setText(card.restarts, `${r.restart_count}${failing}`);
    card.retryRow.hidden = r.next_retry_at == null;
    card.quarantineLine.hidden = r.quarantine_reason == null;
    setText(card.quarantineReason, r.quarantine_reason || "");
    renderWithheld(card, r);
    setText(card.reason, r.reason || "—");
    renderTimes(card, r, Date.now());
    renderActions(card, r);
    applyFilter(card);
  }

  // What the pin guard withholds: the count from the report, the
  // definitions read from the API when the count changes (an approval
  // names the digests shown, so a later change is not approved unseen).
  function renderWithheld(card, r) {
    const n = r.withheld || 0;
    card.withheld.hidden = n === 0;
    setText(card.withheldCount, String(n));
    if (n === 0) {
      card.withheldShown = null;
      card.withheldDigests = [];
      card.withheldList.replaceChildren();
      return;
    }
    if (card.withheldShown !== n) {
      card.withheldShown = n;
      readWithheld(card);
    }
  }

  async function readWithheld(card) {
    try {
      const url = `/api/v1/health/instances/${encodeURIComponent(card.name)}/pins`;
      const response = await fetch(url, { headers: authHeaders() });
      if (!response.ok) return;
      const pins = await response.json();
      card.withheldDigests = pins.held.map((h) => h.digest);
      card.withheldList.replaceChildren(
        ...pins.held.map((h) => {
          const li = document.createElement("li");
          li.dataset.digest = h.digest;
          const change = h.approved == null ? "new" : "changed";
          const says = h.definition && h.definition.description ? `: ${h.definition.description}` : "";
          li.textContent = `${h.kind} ${h.name} (${change})${says}`;
          li.title = `digest ${h.digest}`;
          return li;
        }),
      );
    } catch (err) {
      // The next report reads it again.
      card.withheldShown = null;
    }
  }

  // --- Updates: a new version of the backend (issue 33) ---

  function touchesUpdate(t) {
    return t.from === "updating" || t.to === "updating";
  }

  function updateRunning(u) {
    return u != null && UPDATE_RUNNING.has(u.state);
  }

  // Reads the backend's update (the one in progress, else the last one)
  // and shows it; while it is in progress, reads it again after
  // UPDATE_POLL_MS. A read started later, or an action's answer, wins.
  async function readUpdate(card) {
    const seq = ++card.updateSeq;
    clearTimeout(card.updateTimer);
    card.updateTimer = null;
    const current = () => seq === card.updateSeq && state.cards.get(card.name) === card;
    let update;
    try {
      const url = `/api/v1/health/instances/${encodeURIComponent(card.name)}/update`;
      const response = await fetch(url, { headers: authHeaders(), cache: "no-store" });
      if (response.status === 401) return; // the stream asks for a token
      if (!response.ok) throw new Error(`HTTP ${response.status}`);
      ({ update } = await response.json());
    } catch (err) {
      // Keep what is shown; an update in progress is read again.
      if (current() && updateRunning(card.updateRecord)) scheduleUpdateRead(card);
      return;
    }
    if (current()) applyUpdate(card, update);
  }

  function scheduleUpdateRead(card, delay = UPDATE_POLL_MS) {
    clearTimeout(card.updateTimer);
    card.updateTimer = setTimeout(() => readUpdate(card), delay);
  }

  function applyUpdate(card, u, delay = UPDATE_POLL_MS) {
    card.updateRecord = u || null;
    if (!decisionPending(card)) card.updateDecision = null;
    renderUpdate(card, card.updateRecord);
    renderActions(card, state.reports.get(card.name));
    clearTimeout(card.updateTimer);
    card.updateTimer = null;
    if (updateRunning(u)) scheduleUpdateRead(card, delay);
  }

  // Whether an approve or abort sent from here has not shown its effect
  // yet: the API answers with the update as it was when the decision was
  // handed over (still held), and it goes on a moment later.
  function decisionPending(card) {
    const d = card.updateDecision;
    const u = card.updateRecord;
    if (!d || !u || d.id !== u.id || !updateRunning(u)) return false;
    return d.action === "abort-update" || u.state === "held";
  }

  // The card is gone (a new hello, another token): no more reads for it.
  function forgetUpdate(card) {
    card.updateSeq += 1;
    clearTimeout(card.updateTimer);
    card.updateTimer = null;
  }

  // What a version runs, in the words of the API's `Spec`: the image, or
  // the command line.
  function commandLine(spec) {
    return [spec.command, ...(spec.args || [])].filter((part) => part != null && part !== "").join(" ");
  }

  // Both versions' labels: the image (with the command line only when that
  // is what changed), else the command line.
  function versionLabels(from, to) {
    const [a, b] = [commandLine(from), commandLine(to)];
    const label = (spec, line) => {
      if (!spec.image) return line || "—";
      return a !== b && line ? `${spec.image} (${line})` : spec.image;
    };
    return [label(from, a), label(to, b)];
  }

  // What each state means, after its word.
  function updateSentence(u) {
    switch (u.state) {
      case "starting":
        return u.approved_by
          ? `starting: approved by ${u.approved_by}, switching to the new version`
          : "starting: the new version is starting and being judged";
      case "held":
        return "held: waiting for an operator to approve or abort it (the new version changes or removes definitions)";
      case "baking":
        return "baking: the new version serves; the old one is kept until the bake ends";
      case "succeeded":
        return "succeeded";
      case "rolled_back":
        return "rolled back";
      default:
        return u.state; // a state this page does not know (a newer gateway)
    }
  }

  const DIFF_KINDS = [
    ["tools", "tools"],
    ["prompts", "prompts"],
    ["resource_templates", "resource templates"],
  ];

  // One item per non-empty list: "tools changed: search".
  function diffItems(diff) {
    const items = [];
    for (const [key, kind] of DIFF_KINDS) {
      const changes = diff[key] || {};
      for (const what of ["changed", "removed", "added"]) {
        const names = changes[what] || [];
        if (names.length > 0) items.push({ kind: key, what, text: `${kind} ${what}: ${names.join(", ")}` });
      }
    }
    return items;
  }

  function renderUpdate(card, u) {
    card.update.hidden = u == null;
    if (u == null) {
      delete card.update.dataset.update;
      delete card.update.dataset.updateId;
      renderDiff(card, null);
      return;
    }
    const running = updateRunning(u);
    card.update.dataset.update = u.state;
    card.update.dataset.updateId = u.id;
    setText(card.updateTitle, running ? "Update in progress" : "Last update");
    const why = u.reason ? `: ${u.reason}` : "";
    let outcome = `${updateSentence(u)}${why}`;
    if (decisionPending(card)) {
      outcome = card.updateDecision.action === "abort-update" ? `${u.state}: aborted, rolling back` : `${u.state}: approved, going on`;
    }
    setText(card.updateOutcome, outcome);
    const [from, to] = versionLabels(u.from || {}, u.to || {});
    setText(card.updateFrom, from);
    setText(card.updateTo, to);
    const meta = [u.strategy, `started by ${u.principal} at ${formatClock(Date.parse(u.started_at))}`];
    if (u.approved_by) meta.push(`approved by ${u.approved_by}`);
    if (u.ended_at) meta.push(`ended at ${formatClock(Date.parse(u.ended_at))}`);
    setText(card.updateMeta, meta.join(" · "));
    card.updateMeta.title = `update ${u.id}${u.started_at ? `, started ${u.started_at}` : ""}`;
    renderDiff(card, u.diff);
  }

  function renderDiff(card, diff) {
    // No diff yet (not listed yet, or the old listing was unknown): no list.
    const items = diff == null ? [] : diffItems(diff);
    if (diff != null && items.length === 0) items.push({ kind: "", what: "none", text: "no catalog change" });
    const key = items.map((i) => i.text).join("\n");
    if (card.updateDiff.dataset.key === key) return; // unchanged: polled every UPDATE_POLL_MS
    card.updateDiff.dataset.key = key;
    card.updateDiff.replaceChildren(
      ...items.map((i) => {
        const li = document.createElement("li");
        li.dataset.kind = i.kind;
        li.dataset.change = i.what;
        li.textContent = i.text;
        return li;
      }),
    );
  }

  // The relative times of one card; also called by the 1 s tick.
  function renderTimes(card, r, now) {
    setText(card.since, `for ${formatDuration(now - r.since)}`);
    if (r.next_retry_at != null) {
      const wait = r.next_retry_at - now;
      setText(card.nextRetry, wait > 500 ? `in ${Math.ceil(wait / 1000)}s` : "due now");
    }
  }

  // Items are kept in chronological order in the DOM (CSS shows the newest
  // first); the text reads "from → to · reason · time".
  function appendTransition(card, t) {
    // The stream may repeat a transition already in the hello: skip it.
    for (let item = card.timeline.lastElementChild; item; item = item.previousElementSibling) {
      if (Number(item.dataset.at) < t.at) break;
      if (item.dataset.at === String(t.at) && item.dataset.from === t.from && item.dataset.to === t.to) return;
    }
    const item = document.createElement("li");
    item.dataset.from = t.from;
    item.dataset.to = t.to;
    item.dataset.at = String(t.at);
    const from = document.createElement("span");
    from.className = "t-state";
    from.dataset.s = t.from;
    from.textContent = t.from;
    const to = document.createElement("span");
    to.className = "t-state";
    to.dataset.s = t.to;
    to.textContent = t.to;
    const time = document.createElement("time");
    time.dateTime = new Date(t.at).toISOString();
    time.textContent = formatClock(t.at);
    item.append(from, " → ", to, ` · ${t.reason || "—"} · `, time);
    card.timeline.append(item);
    while (card.timeline.childElementCount > MAX_TIMELINE) card.timeline.firstElementChild.remove();
  }

  function applyFilter(card) {
    const query = el.filter.value.trim().toLowerCase();
    const report = state.reports.get(card.name);
    const match =
      query === "" || card.name.toLowerCase().includes(query) || (report && report.state.includes(query));
    card.el.hidden = !match;
  }

  el.filter.addEventListener("input", () => {
    for (const card of state.cards.values()) applyFilter(card);
  });

  // Relative times only ("for 5m", "in 3s"), from data already held: no
  // request is made here.
  setInterval(() => {
    const now = Date.now();
    for (const [name, card] of state.cards) renderTimes(card, state.reports.get(name), now);
  }, 1000);

  // === 6. Summary and plugins ===

  function renderSummary() {
    for (const item of el.summary.children) {
      const key = item.dataset.count;
      setText($(".count", item), String(state.counts[key]));
      // "other" is noise when zero.
      if (key === "other") item.hidden = state.counts.other === 0;
    }
    const problems = state.counts.down + state.counts.quarantined;
    document.title = problems > 0 ? `(${problems}) Vigil` : "Vigil";
  }

  // The whole list, replaced each time (it is short and sent whole).
  function renderPlugins(listing) {
    const body = el.plugins.tBodies[0];
    body.replaceChildren();
    if (!listing) {
      setText(el.pluginsStatus, "");
      el.plugins.hidden = true;
      return;
    }
    const { dir, plugins } = listing;
    if (dir == null) {
      setText(el.pluginsStatus, "Plugins are off (no [plugins] dir in the configuration).");
      el.plugins.hidden = true;
      return;
    }
    setText(el.pluginsStatus, plugins.length ? `From ${dir}` : `No plugins in ${dir}.`);
    el.plugins.hidden = plugins.length === 0;
    const sorted = [...plugins].sort((a, b) => byName(a.name, b.name));
    for (const p of sorted) {
      const row = body.insertRow();
      row.dataset.plugin = p.name;
      const name = row.insertCell();
      name.textContent = p.name;
      name.title = `${p.file}${p.sha256 ? `\nsha256 ${p.sha256}` : ""}${p.from_cache ? "\n(compiled code from the cache)" : ""}`;
      row.insertCell().textContent = p.kind || "—";
      row.insertCell().textContent = p.version || "—";
      const badge = document.createElement("span");
      badge.className = "state badge";
      badge.dataset.state = p.state;
      badge.textContent = p.state;
      row.insertCell().append(badge);
      const calls = row.insertCell();
      calls.className = "num";
      calls.textContent = String(p.calls);
      if (p.last_duration_ms != null) calls.title = `last call took ${p.last_duration_ms} ms`;
      const failures = row.insertCell();
      failures.className = "num";
      failures.textContent = p.consecutive_failures > 0 ? `${p.failures} (${p.consecutive_failures} in a row)` : String(p.failures);
      // A rejected plugin often has the same text in both.
      const notes = new Set([p.reason, p.last_error].filter(Boolean));
      row.insertCell().textContent = [...notes].join(" · ");
    }
  }

  // === 7. Operator actions ===

  // The buttons a report (and the update shown) allows. Viewers get none:
  // not even in the DOM.
  function wantedActions(card, r) {
    if (state.role !== "operator") return [];
    const actions = [];
    if (r.runtime !== "remote") actions.push("restart"); // the API refuses remote restarts
    actions.push(r.state === "quarantined" ? "release" : "quarantine");
    if (r.withheld > 0) actions.push("approve");
    const u = card.updateRecord;
    if (!decisionPending(card)) {
      if (u && u.state === "held") actions.push("approve-update");
      if (updateRunning(u)) actions.push("abort-update");
    }
    return actions;
  }

  function renderActions(card, r) {
    const wanted = wantedActions(card, r);
    const key = wanted.join(" ");
    if (card.actionsKey === key) return; // unchanged: keep focus and a typed reason
    card.actionsKey = key;
    const hadFocus = card.actions.contains(document.activeElement);
    card.actions.replaceChildren();
    for (const action of wanted) {
      if (action === "quarantine") {
        const input = document.createElement("input");
        input.type = "text";
        input.className = "quarantine-input";
        input.maxLength = 500; // the API's limit
        input.placeholder = "reason (optional)";
        input.setAttribute("aria-label", `Quarantine reason for ${card.name}`);
        card.actions.append(input);
      }
      const button = document.createElement("button");
      button.type = "button";
      button.dataset.action = action;
      button.dataset.backend = card.name;
      const label = ACTION_LABEL[action] || action;
      button.textContent = label;
      button.setAttribute("aria-label", action in ACTION_LABEL ? `${label} of ${card.name}` : `${action} ${card.name}`);
      button.disabled = card.busy;
      card.actions.append(button);
    }
    // The focused button may be gone (quarantine → release): keep focus in the card.
    const first = $("button", card.actions);
    if (hadFocus && first) first.focus();
  }

  function setBusy(card, busy) {
    card.busy = busy;
    card.el.setAttribute("aria-busy", String(busy));
    for (const button of card.actions.querySelectorAll("button")) button.disabled = busy;
  }

  function showActionError(card, message) {
    card.actionError.hidden = !message;
    setText(card.actionError, message);
  }

  async function act(card, action) {
    if (card.busy) return;
    // X-Vigil-Request: the API refuses actions without it (or a token),
    // since a page on another origin cannot send it without a preflight.
    const init = { method: "POST", headers: authHeaders({ "X-Vigil-Request": "1" }) };
    if (action === "quarantine") {
      const input = $(".quarantine-input", card.actions);
      const reason = (input && input.value.trim()) || DEFAULT_QUARANTINE_REASON;
      init.headers = authHeaders({ "X-Vigil-Request": "1", "Content-Type": "application/json" });
      init.body = JSON.stringify({ reason });
    }
    if (action === "approve") {
      init.headers = authHeaders({ "X-Vigil-Request": "1", "Content-Type": "application/json" });
      init.body = JSON.stringify({ digests: card.withheldDigests });
    }
    // Disabling the clicked button drops its focus: give it back afterwards.
    const focused = card.actions.contains(document.activeElement) ? document.activeElement : null;
    const label = ACTION_LABEL[action] || action;
    const isUpdate = action in ACTION_PATH;
    setBusy(card, true);
    showActionError(card, "");
    try {
      const url = `/api/v1/health/instances/${encodeURIComponent(card.name)}/${ACTION_PATH[action] || action}`;
      const response = await fetch(url, init);
      if (response.ok && isUpdate) {
        // The answer is the update as the decision found it; what follows
        // is read until it ends.
        const { update } = await response.json();
        if (state.cards.get(card.name) === card) {
          card.updateSeq += 1; // a read in flight from before is older
          card.updateDecision = update ? { id: update.id, action } : null;
          applyUpdate(card, update, UPDATE_DECIDED_MS);
        }
      } else if (response.ok && action === "approve") {
        // The answer is the pins; the report follows on the stream.
        card.withheldShown = null;
        card.withheldDigests = [];
        card.withheldList.replaceChildren();
      } else if (response.ok) {
        // The stream may already have carried newer states than this
        // answer (a restart is quick): only an answer at least as recent
        // as what is shown replaces it.
        const report = await response.json();
        const shown = state.reports.get(report.name);
        if (!shown || report.since >= shown.since) {
          upsertReport(report);
          renderSummary();
        }
      } else if (response.status === 401) {
        askForToken(`The gateway refused the token: ${await errorMessage(response)}`);
      } else {
        showActionError(card, `${label} failed: ${await errorMessage(response)}`);
        // Changed since it was read: show what is withheld, or the update, now.
        if (action === "approve") readWithheld(card);
        if (isUpdate) readUpdate(card);
      }
    } catch (err) {
      showActionError(card, `${label} failed: cannot reach the gateway`);
    } finally {
      setBusy(card, false);
      if (focused && !card.actions.contains(document.activeElement)) {
        const target = focused.isConnected ? focused : $("button", card.actions);
        if (target) target.focus();
      }
    }
  }

  // One listener for every card's buttons (event delegation).
  el.backends.addEventListener("click", (event) => {
    const button = event.target.closest("button[data-action]");
    if (!button) return;
    const card = state.cards.get(button.dataset.backend);
    if (card) act(card, button.dataset.action);
  });

  // Enter in a quarantine reason quarantines.
  el.backends.addEventListener("keydown", (event) => {
    if (event.key !== "Enter" || !event.target.classList.contains("quarantine-input")) return;
    const card = state.cards.get(event.target.closest(".backend").dataset.backend);
    if (card) act(card, "quarantine");
  });

  // === 8. Start-up ===

  state.token = tokenFromFragment() || sessionStorage.getItem(TOKEN_KEY);
  if (state.token) setToken(state.token);
  renderSummary();
  connect();
})();
