// obmd's web console: xterm.js over the door's WebSocket. The credential
// (the token typed here, or the one-time ticket in the address's fragment,
// which the browser never sends to a server) is the socket's first message.
"use strict";
(function () {
  const $ = (id) => document.getElementById(id);
  const m = location.pathname.match(/^\/nodes\/([^/]+)$/);
  const label = m ? decodeURIComponent(m[1]) : "";
  const params = new URLSearchParams(location.search);
  let ticket = new URLSearchParams(location.hash.slice(1)).get("ticket");
  if (ticket) {
    // Used once: keep it out of the history and of a reload.
    history.replaceState(null, "", location.pathname + location.search);
  }
  $("node").textContent = label;
  document.title = label + " - obmd console";
  $("readonly").checked = params.get("read-only") === "1";

  const term = new Terminal({ cols: 80, rows: 24, scrollback: 5000 });
  window.term = term;
  term.open($("term"));
  const enc = new TextEncoder();
  let ws = null;
  let ended = false;

  function status(text, cls) {
    $("status").textContent = text;
    $("status").className = cls || "";
  }
  function buttons(on) {
    for (const id of ["take", "release", "break"]) $(id).disabled = !on;
  }
  function say(text) { term.write("\r\n[obmd: " + text + "]\r\n"); }
  function send(obj) { if (ws && ws.readyState === WebSocket.OPEN) ws.send(JSON.stringify(obj)); }

  function connect(first) {
    ended = false;
    const scheme = location.protocol === "https:" ? "wss://" : "ws://";
    ws = new WebSocket(scheme + location.host + "/nodes/" + encodeURIComponent(label) + "/ws");
    ws.binaryType = "arraybuffer";
    status("connecting");
    ws.onopen = () => ws.send(JSON.stringify(first));
    ws.onmessage = (e) => {
      if (typeof e.data !== "string") {
        term.write(new Uint8Array(e.data));
        return;
      }
      const msg = JSON.parse(e.data);
      switch (msg.type) {
        case "hello":
          $("login").hidden = true;
          role(msg.role, msg.read_only);
          buttons(!msg.read_only);
          send({ type: "resize", cols: term.cols, rows: term.rows });
          term.focus();
          break;
        case "role":
          role(msg.role, first.read_only);
          break;
        case "notice":
          say(msg.text);
          break;
        case "error":
          ended = true;
          status(msg.error, "error");
          $("login").hidden = false;
          break;
        case "closed":
          ended = true;
          say(msg.text);
          status("session ended: " + msg.reason, "cut");
          break;
      }
    };
    ws.onclose = () => {
      buttons(false);
      if (!ended) status("disconnected", "error");
    };
  }
  function role(r, readOnly) {
    if (readOnly) status("connected, read-only session");
    else if (r === "writer") status("connected, writing", "writer");
    else status("connected, read-only (Take over to write)");
  }

  term.onData((d) => { if (ws && ws.readyState === WebSocket.OPEN) ws.send(enc.encode(d)); });
  $("take").onclick = () => send({ type: "take" });
  $("release").onclick = () => send({ type: "release" });
  $("break").onclick = () => send({ type: "break" });
  $("login").onsubmit = (e) => {
    e.preventDefault();
    const token = $("token").value;
    $("token").value = "";
    connect({ token: token, read_only: $("readonly").checked });
  };
  if (ticket) {
    connect({ ticket: ticket, read_only: $("readonly").checked });
    ticket = null;
  }
})();
