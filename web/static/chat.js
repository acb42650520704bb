// agentgw webchat: plain JavaScript, no build step, no external assets.
//
// Delivery rules (see channels/webchat.py for the protocol):
// - Every message gets a client_id and sits in an outbox (kept in localStorage,
//   so a reload keeps it) until the server has stored it (ack, or its own
//   "message" echo, or the history). On every (re)connect the outbox is resent;
//   the server answers a resent client_id with ack duplicate=true instead of
//   running the turn twice.
// - Everything is rendered by message_id, so a message or reply that arrives
//   twice (replayed, in history and live) is shown once.
// - A reconnect asks for history after the oldest unfinished turn we show (or
//   the last message seen), so a turn that finished or failed while we were
//   away is brought up to date; history.in_flight continues a streaming reply.
// - A silent model is announced ("still waiting for the model…", status frame)
//   until its first delta; a reply that broke off stays on screen as a partial
//   reply with a Retry; a busy frame says the message is queued, not lost.
"use strict";

(() => {
  const BACKOFF_BASE_MS = 500;
  const BACKOFF_CAP_MS = 8000;
  const CONNECT_TIMEOUT_MS = 10000;
  const PING_EVERY_MS = 25000;
  const PONG_WAIT_MS = 10000;
  const SETTLED = new Set(["replied", "failed"]);
  const NOT_STORED = new Set(["unsent", "sending", "held"]);
  const STATUS_LABEL = { unsent: "not sent yet", sending: "sending…", retrying: "retrying…" };
  const FAILED_TEXT = "The answer failed. Your message is saved.";
  const WAITING_TEXT = "still waiting for the model…";

  const storage = safeStorage();
  const session = loadSession();
  const outboxKey = `agentgw.outbox.${session}`;

  const $ = (id) => document.getElementById(id);
  const ui = {
    log: $("log"),
    scroller: $("scroller"),
    empty: $("empty"),
    form: $("composer"),
    input: $("input"),
    send: $("send"),
    hint: $("hint"),
    conn: $("conn"),
    connText: $("conn-text"),
    reconnect: $("reconnect"),
    brain: $("brain-name"),
    agent: $("agent-name"),
    banner: $("offline-banner"),
    bannerClose: $("banner-close"),
  };
  const hintText = ui.hint.textContent;

  const state = {
    ws: null,
    ready: false, // history of the current connection received: safe to send
    loading: false, // the gateway said it is still loading its models
    attempts: 0,
    reconnectTimer: 0,
    connectTimer: 0,
    pingTimer: 0,
    pongTimer: 0,
    connectAfter: 0,
    conversationId: null,
    lastSeen: 0,
    seq: 0,
    limits: { max_message_chars: 8000, max_frame_bytes: 65536, history_on_connect: 100 },
    // Turns whose state a live frame changed on this connection: the history
    // snapshot (read a moment earlier) must not undo that.
    touched: new Set(),
    retryQueue: new Set(),
  };

  const byId = new Map(); // user message id -> user record
  const byClient = new Map(); // client_id -> user record
  const replies = new Map(); // reply message id -> reply record
  const streams = new Map(); // inbound message id -> reply being streamed
  const partials = new Map(); // inbound message id -> partial reply shown (a failed turn's)

  // ---------------------------------------------------------------- storage

  function safeStorage() {
    try {
      const probe = "agentgw.probe";
      window.localStorage.setItem(probe, "1");
      window.localStorage.removeItem(probe);
      return window.localStorage;
    } catch {
      // Private mode or storage disabled: keep things for this page's life only.
      const memory = new Map();
      return {
        getItem: (k) => (memory.has(k) ? memory.get(k) : null),
        setItem: (k, v) => memory.set(k, String(v)),
        removeItem: (k) => memory.delete(k),
      };
    }
  }

  // The offline banner, once dismissed, stays away on this browser (the first reply
  // in each conversation still says that no model is configured).
  const BANNER_KEY = "agentgw.offlineBannerDismissed";

  function bannerDismissed() {
    return storage.getItem(BANNER_KEY) === "1";
  }

  function randomId() {
    const bytes = new Uint8Array(16);
    crypto.getRandomValues(bytes);
    return Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
  }

  function browserZone() {
    try {
      return Intl.DateTimeFormat().resolvedOptions().timeZone || "";
    } catch (err) {
      return "";
    }
  }

  function loadSession() {
    let id = storage.getItem("agentgw.session");
    if (!id || !/^[A-Za-z0-9_-]{8,100}$/.test(id)) {
      id = randomId();
      storage.setItem("agentgw.session", id);
    }
    return id;
  }

  function readOutbox() {
    try {
      const parsed = JSON.parse(storage.getItem(outboxKey) || "{}");
      return parsed && typeof parsed === "object" ? parsed : {};
    } catch {
      return {};
    }
  }

  // Read-modify-write, so two tabs of the same session keep each other's entries.
  function outboxPut(user) {
    const box = readOutbox();
    box[user.clientId] = {
      client_id: user.clientId,
      text: user.text,
      created_at: user.createdAt,
      seq: user.seq,
      held: user.status === "held" ? user.error : null,
    };
    storage.setItem(outboxKey, JSON.stringify(box));
  }

  function outboxDrop(clientId) {
    const box = readOutbox();
    if (clientId in box) {
      delete box[clientId];
      storage.setItem(outboxKey, JSON.stringify(box));
    }
  }

  // -------------------------------------------------------------- rendering

  function compareKeys(a, b) {
    for (let i = 0; i < 3; i += 1) {
      if (a[i] !== b[i]) return a[i] < b[i] ? -1 : 1;
    }
    return 0;
  }

  // Users by message id (unsent ones last, in typing order); a reply right
  // after the message it answers, even when a retry made its id larger.
  function userKey(user) {
    return user.id != null ? [user.id, 0, 0] : [Infinity, 0, user.seq];
  }

  function replyKey(replyTo, id) {
    return replyTo != null ? [replyTo, 1, id ?? Infinity] : [id, 1, id];
  }

  function place(el, key) {
    el.remove();
    el.sortKey = key;
    let before = ui.log.lastElementChild;
    while (before && compareKeys(before.sortKey, key) > 0) before = before.previousElementSibling;
    ui.log.insertBefore(el, before ? before.nextSibling : ui.log.firstChild);
    ui.empty.hidden = ui.log.childElementCount > 0;
  }

  function nearBottom() {
    const s = ui.scroller;
    return s.scrollHeight - s.scrollTop - s.clientHeight < 96;
  }

  function withScroll(change, force = false) {
    const stick = force || nearBottom();
    change();
    if (stick) ui.scroller.scrollTop = ui.scroller.scrollHeight;
  }

  function timeText(iso) {
    if (!iso) return "";
    const date = new Date(iso);
    if (Number.isNaN(date.getTime())) return "";
    return date.toLocaleTimeString([], { hour: "2-digit", minute: "2-digit" });
  }

  function element(tag, className, text) {
    const el = document.createElement(tag);
    if (className) el.className = className;
    if (text != null) el.textContent = text;
    return el;
  }

  function renderUser(user) {
    if (!user.el) {
      user.el = element("li", "msg user");
      user.bubble = element("div", "bubble", user.text);
      user.meta = element("div", "meta");
      user.el.append(user.bubble, user.meta);
    }
    const el = user.el;
    el.classList.toggle("pending", NOT_STORED.has(user.status));
    if (user.id != null) el.dataset.messageId = String(user.id);
    el.dataset.clientId = user.clientId || "";
    el.dataset.status = user.status;
    let label = STATUS_LABEL[user.status];
    if (user.busy && user.status === "received") {
      label = `queued: the gateway is busy, it will answer in its turn (about ${user.busy} s)`;
    }
    user.meta.textContent = [timeText(user.createdAt), label].filter(Boolean).join(" · ");

    user.note?.remove();
    user.note = null;
    if (user.error && (user.status === "failed" || user.status === "held")) {
      const note = element("div", "note");
      note.dataset.code = user.error.code;
      note.append(element("code", null, user.error.code), element("span", null, user.error.message));
      const retry = element("button", "retry", "Retry");
      retry.type = "button";
      retry.setAttribute("aria-label", `Retry: ${user.text.slice(0, 60)}`);
      retry.addEventListener("click", () => retryUser(user));
      note.append(retry);
      if (user.status === "held") {
        const discard = element("button", "discard", "Discard");
        discard.type = "button";
        discard.addEventListener("click", () => discardUser(user));
        note.append(discard);
      }
      el.append(note);
      user.note = note;
    }
    place(el, userKey(user));
  }

  function assistantElement() {
    const el = element("li", "msg assistant");
    const bubble = element("div", "bubble");
    const meta = element("div", "meta");
    el.append(bubble, meta);
    return { el, bubble, meta };
  }

  function ensureStream(replyTo) {
    let stream = streams.get(replyTo);
    if (!stream) {
      stream = { replyTo, text: "", ...assistantElement() };
      stream.el.classList.add("streaming");
      stream.el.setAttribute("aria-busy", "true");
      stream.el.dataset.replyTo = String(replyTo);
      streams.set(replyTo, stream);
      withScroll(() => place(stream.el, replyKey(replyTo, null)));
    }
    return stream;
  }

  // "still waiting for the model…" under a reply that has no text yet.
  function showWaiting(replyTo, waitedS) {
    const stream = ensureStream(replyTo);
    if (stream.text) return;
    if (!stream.waiting) {
      stream.waiting = element("div", "waiting");
      stream.waiting.setAttribute("role", "status");
      withScroll(() => stream.el.append(stream.waiting));
    }
    const seconds = Math.round(waitedS || 0);
    stream.waiting.textContent = seconds > 0 ? `${WAITING_TEXT} ${seconds} s` : WAITING_TEXT;
  }

  // A memory tool the model called ("looked up “marathon”: 3 found"), above its text.
  function showTool(replyTo, text, failed) {
    const stream = ensureStream(replyTo);
    const line = element("div", failed ? "tool failed" : "tool");
    line.textContent = text;
    withScroll(() => stream.el.insertBefore(line, stream.bubble));
  }

  // A reply's tool lines as the history replays them (a stored turn, or the one in
  // flight): only those the element does not show yet, as live frames may have drawn
  // some of them already.
  function replayTools(parts, lines) {
    if (!lines || !lines.length) return;
    const shown = new Map();
    for (const el of parts.el.querySelectorAll(".tool")) {
      shown.set(el.textContent, (shown.get(el.textContent) || 0) + 1);
    }
    for (const line of lines) {
      const left = shown.get(line.text) || 0;
      if (left > 0) {
        shown.set(line.text, left - 1);
        continue;
      }
      const el = element("div", line.error ? "tool failed" : "tool");
      el.textContent = line.text;
      withScroll(() => parts.el.insertBefore(el, parts.bubble));
    }
  }

  function clearWaiting(stream) {
    if (stream?.waiting) {
      stream.waiting.remove();
      stream.waiting = null;
    }
  }

  // What a broken reply had streamed, marked partial, with a Retry of its turn.
  function showPartial(user) {
    dropPartial(user.id);
    if (!user.partial) return;
    const parts = assistantElement();
    parts.el.classList.add("partial");
    parts.el.dataset.replyTo = String(user.id);
    parts.bubble.textContent = user.partial;
    parts.meta.append(element("span", null, "partial reply: the answer broke off · "));
    const retry = element("button", "retry link", "Retry");
    retry.type = "button";
    retry.setAttribute("aria-label", `Retry the answer to: ${user.text.slice(0, 60)}`);
    retry.addEventListener("click", () => retryUser(user));
    parts.meta.append(retry);
    partials.set(user.id, parts.el);
    withScroll(() => place(parts.el, replyKey(user.id, null)));
  }

  function dropPartial(replyTo) {
    partials.get(replyTo)?.remove();
    partials.delete(replyTo);
  }

  function setStreamText(stream, text) {
    stream.text = text;
    withScroll(() => {
      stream.bubble.textContent = text;
    });
  }

  function dropStream(replyTo) {
    const stream = streams.get(replyTo);
    if (stream) {
      stream.el.remove();
      streams.delete(replyTo);
    }
  }

  function showReply(frame) {
    const replyTo = frame.reply_to ?? null;
    const known = replies.get(frame.message_id);
    if (known) {
      if (replyTo != null) dropStream(replyTo);
      return known;
    }
    const stream = replyTo != null ? streams.get(replyTo) : null;
    let parts;
    if (stream) {
      streams.delete(replyTo);
      clearWaiting(stream);
      parts = stream;
      parts.el.classList.remove("streaming");
      parts.el.removeAttribute("aria-busy");
    } else {
      parts = assistantElement();
    }
    const reply = { id: frame.message_id, replyTo, el: parts.el, bubble: parts.bubble };
    parts.bubble.textContent = frame.text;
    parts.meta.textContent = timeText(frame.created_at || new Date().toISOString());
    parts.el.dataset.messageId = String(frame.message_id);
    if (replyTo != null) parts.el.dataset.replyTo = String(replyTo);
    replies.set(reply.id, reply);
    seen(reply.id);
    withScroll(() => place(parts.el, replyKey(replyTo, reply.id)));
    return reply;
  }

  function notice(text, isError) {
    const el = element("li", `notice${isError ? " error" : ""}`, text);
    withScroll(() => place(el, [state.lastSeen + 0.5, 2, (state.seq += 1)]));
  }

  // ------------------------------------------------------------ user state

  function seen(id) {
    if (id > state.lastSeen) state.lastSeen = id;
  }

  function newUser(fields) {
    const user = { id: null, clientId: null, error: null, el: null, ...fields };
    if (user.seq == null) user.seq = (state.seq += 1);
    if (user.clientId) byClient.set(user.clientId, user);
    if (user.id != null) {
      byId.set(user.id, user);
      seen(user.id);
    }
    return user;
  }

  // The server has the message: it leaves the outbox.
  function bindStored(user, messageId) {
    if (user.id == null) {
      user.id = messageId;
      byId.set(messageId, user);
      seen(messageId);
    }
    if (user.clientId) outboxDrop(user.clientId);
  }

  function setStatus(user, status, error = null) {
    user.status = status;
    user.error = error;
    if (status !== "received") user.busy = null;
    if (status !== "failed") user.partial = null;
    if (user.id != null && status !== "failed") dropPartial(user.id);
    // The live stream goes; what the store kept of it (partial_text) comes back marked.
    if (status === "failed" && user.id != null) {
      dropStream(user.id);
      showPartial(user);
    } else if (!SETTLED.has(status) && !NOT_STORED.has(status)) ensureStream(user.id);
    withScroll(() => renderUser(user));
  }

  function userFor(messageId, clientId) {
    return byId.get(messageId) || (clientId ? byClient.get(clientId) : undefined);
  }

  function afterId() {
    let after = state.lastSeen;
    for (const user of byId.values()) {
      if (!SETTLED.has(user.status)) after = Math.min(after, user.id - 1);
    }
    return Math.max(after, 0);
  }

  // ------------------------------------------------------------ connection

  function loaded() {
    // A turn ran: the models are loaded.
    if (!state.loading) return;
    state.loading = false;
    setConnection("open", "Connected");
  }

  function setConnection(kind, text) {
    ui.conn.dataset.state = kind;
    ui.connText.textContent = text;
    ui.reconnect.hidden = kind !== "waiting";
  }

  function connect() {
    clearTimeout(state.reconnectTimer);
    if (state.ws) return;
    state.connectAfter = afterId();
    const scheme = location.protocol === "https:" ? "wss:" : "ws:";
    // The browser's time zone: "yesterday" in memory is the person's yesterday.
    const url = `${scheme}//${location.host}/ws?session=${session}&after=${state.connectAfter}` +
      `&tz=${encodeURIComponent(browserZone())}`;
    setConnection("connecting", state.attempts ? "Reconnecting…" : "Connecting…");
    let ws;
    try {
      ws = new WebSocket(url);
    } catch {
      scheduleReconnect();
      return;
    }
    state.ws = ws;
    state.ready = false;
    state.touched = new Set();
    state.connectTimer = setTimeout(() => dropSocket(ws), CONNECT_TIMEOUT_MS);
    ws.onmessage = (event) => onFrame(ws, event);
    ws.onclose = () => onClosed(ws);
  }

  function dropSocket(ws) {
    // Do not wait for a closing handshake a dead network will never finish.
    ws.onclose = null;
    ws.onmessage = null;
    try {
      ws.close();
    } catch {
      // already closed
    }
    onClosed(ws);
  }

  function onClosed(ws) {
    if (state.ws !== ws) return;
    state.ws = null;
    state.ready = false;
    clearTimeout(state.connectTimer);
    clearInterval(state.pingTimer);
    clearTimeout(state.pongTimer);
    for (const user of byClient.values()) {
      if (user.status === "sending") setStatus(user, "unsent");
    }
    scheduleReconnect();
  }

  function scheduleReconnect() {
    clearTimeout(state.reconnectTimer);
    const exp = Math.min(BACKOFF_CAP_MS, BACKOFF_BASE_MS * 2 ** state.attempts);
    const delay = Math.round(exp * (0.8 + Math.random() * 0.4));
    state.attempts += 1;
    const seconds = Math.max(1, Math.round(delay / 1000));
    setConnection("waiting", `Disconnected · retrying in ${seconds} s`);
    state.reconnectTimer = setTimeout(connect, delay);
  }

  // Skip the backoff wait (user action, network back); an open or opening socket is kept.
  function reconnectNow() {
    if (state.ws) return;
    state.attempts = 0;
    connect();
  }

  function sendFrame(frame) {
    if (!state.ws || state.ws.readyState !== WebSocket.OPEN) return false;
    state.ws.send(JSON.stringify(frame));
    return true;
  }

  function startPinging(ws) {
    clearInterval(state.pingTimer);
    state.pingTimer = setInterval(() => {
      if (state.ws !== ws) return;
      sendFrame({ type: "ping" });
      clearTimeout(state.pongTimer);
      state.pongTimer = setTimeout(() => dropSocket(ws), PONG_WAIT_MS);
    }, PING_EVERY_MS);
  }

  // ---------------------------------------------------------------- frames

  function onFrame(ws, event) {
    if (state.ws !== ws) return;
    clearTimeout(state.pongTimer); // any frame shows the connection is alive
    let frame;
    try {
      frame = JSON.parse(event.data);
    } catch {
      return;
    }
    const handler = handlers[frame.type];
    if (handler) handler(frame, ws);
  }

  const handlers = {
    hello(frame, ws) {
      clearTimeout(state.connectTimer);
      if (state.conversationId != null && frame.conversation_id !== state.conversationId) {
        // A different store answers this session: start the view afresh.
        resetView();
        state.conversationId = frame.conversation_id;
        dropSocket(ws);
        reconnectNow();
        return;
      }
      state.conversationId = frame.conversation_id;
      state.attempts = 0;
      Object.assign(state.limits, frame.limits || {});
      ui.agent.textContent = frame.agent;
      ui.brain.textContent = `brain: ${frame.brain}`;
      ui.banner.hidden = frame.brain !== "offline" || bannerDismissed();
      // A gateway still loading its models keeps what is sent and answers once loaded.
      state.loading = Boolean(frame.starting);
      setConnection("open", state.loading ? "Connected (the agent is still loading)" : "Connected");
      startPinging(ws);
    },

    history(frame, ws) {
      const messages = frame.messages || [];
      if (state.connectAfter > 0 && messages.length >= state.limits.history_on_connect) {
        // More was missed than one history frame holds: reload the view whole.
        resetView();
        dropSocket(ws);
        reconnectNow();
        return;
      }
      const flight = frame.in_flight;
      for (const m of messages) {
        if (m.role === "user") historyUser(m, flight);
        else replayTools(showReply(m), m.tool_lines);
      }
      if (flight && !SETTLED.has(byId.get(flight.reply_to)?.status)) {
        const stream = ensureStream(flight.reply_to);
        replayTools(stream, flight.tool_lines);
        setStreamText(stream, flight.text);
      }
      state.ready = true;
      flushOutbox();
      flushRetries();
    },

    ack(frame) {
      const user = byClient.get(frame.client_id);
      if (!user) return;
      bindStored(user, frame.message_id);
      if (NOT_STORED.has(user.status)) setStatus(user, "received");
    },

    message(frame) {
      let user = userFor(frame.message_id, frame.client_id);
      if (!user) {
        user = newUser({ text: frame.text, createdAt: frame.created_at, status: "received" });
      }
      bindStored(user, frame.message_id);
      if (NOT_STORED.has(user.status) || user.el == null) setStatus(user, "received");
    },

    delta(frame) {
      loaded();
      state.touched.add(frame.reply_to);
      const user = byId.get(frame.reply_to);
      if (user && user.status !== "generating") setStatus(user, "generating");
      const stream = ensureStream(frame.reply_to);
      clearWaiting(stream);
      setStreamText(stream, stream.text + frame.text);
    },

    status(frame) {
      if (frame.state === "tool" && frame.reply_to != null) {
        showTool(frame.reply_to, frame.text, frame.error);
        return;
      }
      if (frame.state !== "waiting" || frame.reply_to == null) return;
      const user = byId.get(frame.reply_to);
      if (user && SETTLED.has(user.status)) return;
      showWaiting(frame.reply_to, frame.waited_s);
    },

    busy(frame) {
      const user = userFor(frame.message_id, frame.client_id);
      if (!user) return;
      user.busy = Math.max(1, Math.round(frame.retry_after_s || 1));
      if (user.status === "received") withScroll(() => renderUser(user));
    },

    reply(frame) {
      loaded();
      if (frame.reply_to != null) state.touched.add(frame.reply_to);
      showReply(frame);
      const user = byId.get(frame.reply_to);
      if (user) setStatus(user, "replied");
    },

    retrying(frame) {
      state.touched.add(frame.message_id);
      const user = byId.get(frame.message_id);
      if (user) setStatus(user, "received");
    },

    error(frame) {
      const error = { code: frame.code, message: frame.message || FAILED_TEXT };
      if (frame.reply_to != null) {
        state.touched.add(frame.reply_to);
        const user = byId.get(frame.reply_to);
        dropStream(frame.reply_to);
        if (user) {
          user.partial = frame.partial_text || null;
          setStatus(user, "failed", error);
        }
        else notice(`${frame.code}: ${error.message}`, true);
        return;
      }
      if (frame.client_id != null) {
        const user = byClient.get(frame.client_id);
        if (user && user.id == null) {
          setStatus(user, "held", error);
          outboxPut(user);
          return;
        }
      }
      if (frame.retry_of != null) {
        const user = byId.get(frame.retry_of);
        if (user) {
          setStatus(user, "failed", error);
          return;
        }
      }
      notice(`${frame.code}: ${error.message}`, true);
    },

    pong() {},

    link_code(frame) {
      document.dispatchEvent(new CustomEvent("agentgw:link-code", { detail: frame }));
    },
  };

  function historyUser(m, flight) {
    let user = userFor(m.message_id, m.client_id);
    if (!user) {
      user = newUser({
        id: m.message_id,
        clientId: m.client_id,
        text: m.text,
        createdAt: m.created_at,
        status: "received",
      });
    }
    bindStored(user, m.message_id);
    user.createdAt = m.created_at || user.createdAt;
    if (state.touched.has(m.message_id)) {
      // A live frame of this connection (deltas and the reply may come ahead of the
      // history) already moved this turn on: keep that state. The message was only
      // now bound to its stored id, though: it leaves the pending look, and it is
      // placed again, by id, so it stays above the reply it got.
      if (NOT_STORED.has(user.status)) {
        const answered = [...replies.values()].some((r) => r.replyTo === m.message_id);
        setStatus(user, answered ? "replied" : "generating");
      } else {
        withScroll(() => renderUser(user));
      }
      return;
    }
    const status = m.status || "replied";
    if (status === "failed") {
      user.partial = m.partial_text || null;
      setStatus(user, "failed", { code: m.error_code || "failed", message: FAILED_TEXT });
      return;
    }
    setStatus(user, status);
    // An unfinished turn not streaming now shows the typing bubble, not stale text.
    if (!SETTLED.has(status) && !(flight && flight.reply_to === m.message_id)) {
      setStreamText(ensureStream(m.message_id), "");
    }
  }

  function resetView() {
    const unsent = [...byClient.values()].filter((u) => u.id == null);
    byId.clear();
    byClient.clear();
    replies.clear();
    streams.clear();
    partials.clear();
    ui.log.replaceChildren();
    ui.empty.hidden = false;
    state.lastSeen = 0;
    for (const user of unsent) {
      user.el = null;
      user.note = null;
      byClient.set(user.clientId, user);
      renderUser(user);
    }
  }

  // --------------------------------------------------------------- sending

  function transmit(user) {
    if (sendFrame({ type: "message", text: user.text, client_id: user.clientId })) {
      setStatus(user, "sending");
    }
  }

  function flushOutbox() {
    const waiting = [...byClient.values()]
      .filter((u) => u.id == null && (u.status === "unsent" || u.status === "sending"))
      .sort((a, b) => a.seq - b.seq);
    for (const user of waiting) transmit(user);
  }

  function flushRetries() {
    for (const id of state.retryQueue) {
      const user = byId.get(id);
      if (user && sendFrame({ type: "retry", message_id: id })) setStatus(user, "retrying");
    }
    state.retryQueue.clear();
  }

  function retryUser(user) {
    if (user.id == null) {
      setStatus(user, "unsent");
      outboxPut(user);
      if (state.ready) transmit(user);
      return;
    }
    setStatus(user, "retrying");
    if (!state.ready || !sendFrame({ type: "retry", message_id: user.id })) {
      state.retryQueue.add(user.id);
      reconnectNow();
    }
  }

  function discardUser(user) {
    outboxDrop(user.clientId);
    byClient.delete(user.clientId);
    user.el?.remove();
    ui.empty.hidden = ui.log.childElementCount > 0;
  }

  function tooLong(text) {
    const chars = [...text].length; // code points, as the server counts them
    if (chars > state.limits.max_message_chars) {
      return `That is ${chars} characters; the limit is ${state.limits.max_message_chars}.`;
    }
    const frame = JSON.stringify({ type: "message", text, client_id: randomId() });
    if (new TextEncoder().encode(frame).length > state.limits.max_frame_bytes) {
      return "That message is too large to send in one piece.";
    }
    return "";
  }

  function submit() {
    const text = ui.input.value;
    if (!text.trim()) return;
    const problem = tooLong(text);
    ui.hint.textContent = problem || hintText;
    ui.hint.classList.toggle("too-long", Boolean(problem));
    if (problem) return;
    const user = newUser({
      clientId: randomId(),
      text,
      createdAt: new Date().toISOString(),
      status: "unsent",
    });
    outboxPut(user);
    withScroll(() => renderUser(user), true);
    ui.input.value = "";
    autosize();
    if (state.ready) transmit(user);
    else reconnectNow();
  }

  function autosize() {
    ui.input.style.height = "auto";
    ui.input.style.height = `${ui.input.scrollHeight + 2}px`;
  }

  // ------------------------------------------------------------------ start

  ui.form.addEventListener("submit", (event) => {
    event.preventDefault();
    submit();
    ui.input.focus();
  });
  ui.input.addEventListener("keydown", (event) => {
    if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
      event.preventDefault();
      submit();
    }
  });
  ui.input.addEventListener("input", () => {
    autosize();
    if (ui.hint.classList.contains("too-long")) {
      const problem = tooLong(ui.input.value);
      ui.hint.textContent = problem || hintText;
      ui.hint.classList.toggle("too-long", Boolean(problem));
    }
  });
  ui.reconnect.addEventListener("click", reconnectNow);
  ui.bannerClose.addEventListener("click", () => {
    storage.setItem(BANNER_KEY, "1");
    ui.banner.hidden = true;
  });
  window.addEventListener("online", reconnectNow);
  document.addEventListener("visibilitychange", () => {
    if (document.visibilityState === "visible" && !state.ws) reconnectNow();
  });

  // What the push-to-talk and link controls (talk.js) may use of this page.
  window.agentgwChat = {
    session,
    notice,
    // A spoken turn: the transcript is stored already, shown like any message of
    // this conversation (deduplicated against the WebSocket's own frame).
    heard(messageId, text) {
      handlers.message({ message_id: messageId, text, created_at: new Date().toISOString() });
    },
    replied(replyTo, replyId, text) {
      handlers.reply({
        message_id: replyId,
        reply_to: replyTo,
        text,
        created_at: new Date().toISOString(),
      });
    },
    failed(replyTo, code, message) {
      handlers.error({ code, message, reply_to: replyTo });
    },
    requestLinkCode() {
      if (!sendFrame({ type: "link_code" })) {
        notice("Not connected: the link code needs a connection.", true);
        return false;
      }
      return true;
    },
  };

  // Messages a previous visit of this page had not got stored yet.
  const saved = Object.values(readOutbox()).sort((a, b) => a.seq - b.seq);
  for (const entry of saved) {
    if (!entry || typeof entry.client_id !== "string" || typeof entry.text !== "string") continue;
    const user = newUser({
      clientId: entry.client_id,
      text: entry.text,
      createdAt: entry.created_at,
      seq: entry.seq,
      status: entry.held ? "held" : "unsent",
      error: entry.held || null,
    });
    state.seq = Math.max(state.seq, user.seq || 0);
    renderUser(user);
  }
  connect();
  ui.input.focus();
})();
