// agentgw webchat: push-to-talk and the Telegram link code. Plain JavaScript.
//
// Push-to-talk records one utterance with MediaRecorder while the button (or
// the space bar in an empty input) is held, and on release posts it to
// /api/voice?session=<this page's session>&stream=1 (see web/voice_api.py for
// why an upload and not audio frames on the WebSocket). The server stores the
// transcript as this conversation's message, so the open WebSocket shows it and
// streams the reply like a typed turn; the NDJSON answer adds the reply audio,
// one clip per sentence, played in order as it arrives, and any error.
"use strict";

(() => {
  const chat = window.agentgwChat;
  if (!chat) return;

  const $ = (id) => document.getElementById(id);
  const ui = {
    talk: $("talk"),
    state: $("talk-state"),
    level: $("talk-level"),
    text: $("talk-text"),
    input: $("input"),
    linkOpen: $("link-open"),
    linkDialog: $("link-dialog"),
    linkCommand: $("link-command"),
    linkCopy: $("link-copy"),
    linkExpiry: $("link-expiry"),
  };
  const MIN_HOLD_MS = 300;
  const maxSeconds = Number(document.body.dataset.voiceMaxSeconds) || 60;
  const voiceOn = document.body.dataset.voice === "on";

  const rec = {
    phase: "idle", // idle | starting | recording | sending
    stream: null,
    recorder: null,
    chunks: [],
    startedAt: 0,
    timer: 0,
    limitTimer: 0,
    audioCtx: null,
    released: false,
  };
  const player = { queue: [], playing: null };

  // ----------------------------------------------------------- recording

  function supported() {
    return Boolean(navigator.mediaDevices?.getUserMedia && window.MediaRecorder);
  }

  function pickType() {
    for (const type of ["audio/webm;codecs=opus", "audio/ogg;codecs=opus", "audio/webm"]) {
      if (MediaRecorder.isTypeSupported(type)) return type;
    }
    return "";
  }

  function showState(text) {
    ui.state.hidden = !text;
    ui.text.textContent = text || "";
    ui.talk.dataset.state = rec.phase;
  }

  function clock(seconds) {
    const s = Math.floor(seconds);
    return `${Math.floor(s / 60)}:${String(s % 60).padStart(2, "0")}`;
  }

  async function start() {
    if (rec.phase !== "idle") return;
    rec.phase = "starting";
    rec.released = false;
    showState("Starting the microphone…");
    try {
      rec.stream = await navigator.mediaDevices.getUserMedia({ audio: true });
    } catch (err) {
      rec.phase = "idle";
      showState("");
      const blocked = err && (err.name === "NotAllowedError" || err.name === "SecurityError");
      chat.notice(
        blocked
          ? "The microphone is blocked for this page: allow it in the browser to talk."
          : `No microphone could be opened (${err && err.name ? err.name : "unknown error"}).`,
        true,
      );
      return;
    }
    if (rec.released) {
      // Let go before the microphone opened: a tap, not a hold.
      stopTracks();
      rec.phase = "idle";
      showState("Hold the button while you speak.");
      return;
    }
    const type = pickType();
    rec.recorder = new MediaRecorder(rec.stream, type ? { mimeType: type } : undefined);
    rec.chunks = [];
    rec.recorder.addEventListener("dataavailable", (event) => {
      if (event.data && event.data.size) rec.chunks.push(event.data);
    });
    rec.recorder.addEventListener("stop", finish);
    rec.recorder.start(250);
    rec.startedAt = performance.now();
    rec.phase = "recording";
    meter(rec.stream);
    tick();
    rec.timer = setInterval(tick, 200);
    // The server refuses longer audio: stop at its limit rather than lose the take.
    rec.limitTimer = setTimeout(stop, maxSeconds * 1000);
  }

  function tick() {
    const seconds = (performance.now() - rec.startedAt) / 1000;
    showState(`Listening… ${clock(seconds)} / ${clock(maxSeconds)} — release to send`);
  }

  function meter(stream) {
    try {
      rec.audioCtx = new AudioContext();
      const source = rec.audioCtx.createMediaStreamSource(stream);
      const analyser = rec.audioCtx.createAnalyser();
      analyser.fftSize = 512;
      source.connect(analyser);
      const samples = new Uint8Array(analyser.fftSize);
      const draw = () => {
        if (rec.phase !== "recording") return;
        analyser.getByteTimeDomainData(samples);
        let peak = 0;
        for (const v of samples) peak = Math.max(peak, Math.abs(v - 128));
        ui.level.style.width = `${Math.min(100, (peak / 128) * 140)}%`;
        requestAnimationFrame(draw);
      };
      draw();
    } catch {
      // The level meter is a nicety; recording works without it.
    }
  }

  function stop() {
    rec.released = true;
    if (rec.phase !== "recording") return;
    clearInterval(rec.timer);
    clearTimeout(rec.limitTimer);
    rec.phase = "sending";
    showState("Sending…");
    rec.recorder.stop(); // "stop" fires finish() with the last chunk
  }

  function stopTracks() {
    for (const track of rec.stream ? rec.stream.getTracks() : []) track.stop();
    rec.stream = null;
    if (rec.audioCtx) rec.audioCtx.close().catch(() => {});
    rec.audioCtx = null;
    ui.level.style.width = "0";
  }

  async function finish() {
    const held = performance.now() - rec.startedAt;
    const type = rec.recorder.mimeType || "audio/webm";
    const blob = new Blob(rec.chunks, { type });
    stopTracks();
    rec.recorder = null;
    rec.chunks = [];
    if (held < MIN_HOLD_MS || blob.size === 0) {
      rec.phase = "idle";
      showState("Hold the button while you speak.");
      return;
    }
    try {
      await send(blob, type);
      showState("");
    } catch (err) {
      showState("");
      chat.notice(`Voice message not sent: ${err.message || err}`, true);
    } finally {
      rec.phase = "idle";
      ui.talk.dataset.state = "idle";
    }
  }

  // ------------------------------------------------------------- sending

  async function send(blob, type) {
    const url = `/api/voice?session=${encodeURIComponent(chat.session)}&stream=1`;
    const response = await fetch(url, {
      method: "POST",
      headers: { "Content-Type": type.split(";")[0] },
      body: blob,
      credentials: "same-origin",
    });
    if (!response.ok) {
      let detail = `HTTP ${response.status}`;
      try {
        const body = await response.json();
        if (body.error) detail = `${body.error.code}: ${body.error.message}`;
      } catch {
        // Not JSON (a proxy's page): the status says enough.
      }
      chat.notice(detail, true);
      return;
    }
    const reader = response.body.getReader();
    const decoder = new TextDecoder();
    let buffered = "";
    let messageId = null;
    for (;;) {
      const { value, done } = await reader.read();
      if (value) buffered += decoder.decode(value, { stream: true });
      let newline;
      while ((newline = buffered.indexOf("\n")) >= 0) {
        const line = buffered.slice(0, newline).trim();
        buffered = buffered.slice(newline + 1);
        if (!line) continue;
        let event;
        try {
          event = JSON.parse(line);
        } catch {
          continue;
        }
        messageId = onEvent(event, messageId);
      }
      if (done) break;
    }
  }

  function onEvent(event, messageId) {
    switch (event.type) {
      case "transcript":
        showState("Thinking…");
        chat.heard(event.message_id, event.text);
        return event.message_id;
      case "audio":
        enqueue(event.url);
        return messageId;
      case "reply":
        chat.replied(messageId, event.reply_id, event.text);
        return messageId;
      case "error":
        if (messageId != null) chat.failed(messageId, event.code, event.message);
        else chat.notice(`${event.code}: ${event.message}`, true);
        return messageId;
      default:
        return messageId;
    }
  }

  // ------------------------------------------------------------- playing

  function enqueue(url) {
    player.queue.push(url);
    if (!player.playing) playNext();
  }

  function playNext() {
    const url = player.queue.shift();
    if (!url) {
      player.playing = null;
      return;
    }
    const audio = new Audio(url);
    audio.className = "reply-audio";
    player.playing = audio;
    audio.addEventListener("ended", playNext);
    audio.addEventListener("error", playNext);
    audio.play().catch(() => {
      // Autoplay refused: say so, and go on with the next clip.
      chat.notice("The browser blocked playing the reply aloud (autoplay).", false);
      playNext();
    });
  }

  // -------------------------------------------------------------- wiring

  if (voiceOn && supported()) {
    ui.talk.hidden = false;
    ui.talk.dataset.state = "idle";
    ui.talk.addEventListener("pointerdown", (event) => {
      event.preventDefault();
      ui.talk.setPointerCapture?.(event.pointerId);
      start();
    });
    for (const kind of ["pointerup", "pointercancel", "lostpointercapture"]) {
      ui.talk.addEventListener(kind, stop);
    }
    ui.talk.addEventListener("contextmenu", (event) => event.preventDefault());
    // The space bar talks while the input is empty (it types otherwise).
    document.addEventListener("keydown", (event) => {
      if (event.code !== "Space" || event.repeat || ui.input.value !== "") return;
      if (document.activeElement && document.activeElement !== ui.input) {
        if (document.activeElement !== document.body && document.activeElement !== ui.talk) return;
      }
      event.preventDefault();
      start();
    });
    document.addEventListener("keyup", (event) => {
      if (event.code === "Space" && rec.phase !== "idle") {
        event.preventDefault();
        stop();
      }
    });
  }

  // --------------------------------------------------------- Link Telegram

  ui.linkOpen.addEventListener("click", () => {
    ui.linkCommand.textContent = "…";
    ui.linkExpiry.textContent = "Asking for a code…";
    if (!chat.requestLinkCode()) return;
    if (typeof ui.linkDialog.showModal === "function") ui.linkDialog.showModal();
    else ui.linkDialog.setAttribute("open", "");
  });
  document.addEventListener("agentgw:link-code", (event) => {
    const { code, expires_at: expiresAt } = event.detail;
    ui.linkCommand.textContent = `/link ${code}`;
    const expires = new Date(expiresAt);
    ui.linkExpiry.textContent = Number.isNaN(expires.getTime())
      ? "The code works once."
      : `The code works once, until ${expires.toLocaleTimeString([], {
          hour: "2-digit",
          minute: "2-digit",
        })}.`;
  });
  ui.linkCopy.addEventListener("click", async () => {
    try {
      await navigator.clipboard.writeText(ui.linkCommand.textContent);
      ui.linkCopy.textContent = "Copied";
    } catch {
      ui.linkCopy.textContent = "Select and copy";
    }
  });
})();
