// toolgate console: the key, errors, focus, the playground's stream, and
// the host of MCP Apps. Every piece of HTML inserted here was rendered
// (and escaped) by the gateway; text from models and tools is only ever
// set as text. An MCP App's HTML is never inserted here: it runs in a
// sandboxed frame of its own (an opaque origin; see `apps.rs`).
(function () {
  "use strict";
  var KEY = "toolgate.key";

  function key() { return sessionStorage.getItem(KEY) || ""; }

  function headers(extra) {
    var h = { "HX-Request": "true" };
    if (key()) { h["Authorization"] = "Bearer " + key(); }
    for (var k in extra) { h[k] = extra[k]; }
    return h;
  }

  function alertBox(message) {
    var box = document.getElementById("alert");
    if (!message) { box.hidden = true; box.textContent = ""; return; }
    box.textContent = message;
    box.hidden = false;
  }

  // The gateway's errors are JSON: {"error": {"message", "code"}}.
  function errorText(status, text) {
    try {
      var e = JSON.parse(text).error;
      return e.message + " (" + status + " " + e.code + ")";
    } catch (_) {
      return "The gateway answered " + status + ".";
    }
  }

  function load(path) {
    htmx.ajax("GET", path, { target: "#main" });
  }

  document.addEventListener("htmx:configRequest", function (e) {
    if (key()) { e.detail.headers["Authorization"] = "Bearer " + key(); }
  });

  document.addEventListener("htmx:beforeRequest", function () { alertBox(""); });

  document.addEventListener("htmx:responseError", function (e) {
    var xhr = e.detail.xhr;
    alertBox(errorText(xhr.status, xhr.responseText));
    if (xhr.status === 401) {
      var input = document.getElementById("api-key");
      if (input) { input.focus(); }
    }
  });

  document.addEventListener("htmx:sendError", function () {
    alertBox("The gateway could not be reached.");
  });

  // A new page: its heading takes the focus, for keyboards and readers.
  document.addEventListener("htmx:afterSwap", function (e) {
    if (e.detail.target.id === "main") {
      var title = document.getElementById("page-title");
      if (title) { title.focus(); }
    }
    if (document.getElementById("play-form")) { setUpPlayground(); }
    if (document.getElementById("dashboard")) { setUpDashboard(); }
    setUpApps();
  });

  // The dashboard's charts, drawn by uPlot from the data the gateway put
  // in the page (numbers only). Each chart's container says what it drew
  // (data-drawn: its series as drawn), for people's tools and tests.
  function setUpDashboard() {
    var box = document.getElementById("dashboard");
    var data;
    try { data = JSON.parse(box.getAttribute("data-dashboard")); } catch (_) { return; }
    var colors = ["#1f5fbf", "#c0392b", "#2e8b57", "#8e44ad"];
    function chart(id, names, columns) {
      var el = document.getElementById(id);
      if (!el || typeof uPlot === "undefined") { return; }
      el.textContent = "";
      var series = [{}].concat(names.map(function (n, i) {
        return { label: n, stroke: colors[i % colors.length], width: 2, points: { show: true, size: 5 } };
      }));
      var drawn = [data.hours].concat(columns);
      // As wide as its box (the grid's column), less its padding.
      var width = Math.max(240, el.parentNode.clientWidth - 20);
      new uPlot({ width: width, height: 200, series: series, axes: [{}, {}] }, drawn, el);
      el.setAttribute("data-drawn", JSON.stringify(drawn));
    }
    chart("chart-calls", ["model calls"], [data.model_calls]);
    chart("chart-latency", ["p50", "p95"], [data.latency_p50_ms, data.latency_p95_ms]);
    chart("chart-tokens", ["input", "output", "cached input"], [data.input_tokens, data.output_tokens, data.cached_input_tokens]);
    chart("chart-spend", ["USD"], [data.priced_cost_usd]);
    chart("chart-tools", ["tool calls", "failures"], [data.tool_calls, data.tool_failures]);
  }

  function setUpKeyForm() {
    var form = document.getElementById("key-form");
    if (!form) { return; }
    var state = document.getElementById("key-state");
    state.textContent = key() ? "A key is set for this tab." : "No key set yet.";
    form.addEventListener("submit", function (e) {
      e.preventDefault();
      var input = document.getElementById("api-key");
      var value = input.value.trim();
      if (value) { sessionStorage.setItem(KEY, value); }
      input.value = "";
      state.textContent = "A key is set for this tab.";
      load("/console/ui/catalog");
    });
    document.getElementById("forget-key").addEventListener("click", function () {
      sessionStorage.removeItem(KEY);
      state.textContent = "No key set.";
      document.getElementById("main").textContent = "";
    });
  }

  // The playground: the conversation lives in this page. Turns are
  // numbered once (ids in the page); a stream from before "New
  // conversation" changes nothing.
  var conversation = [];
  var nextTurn = 0;
  var generation = 0;

  function setUpPlayground() {
    var form = document.getElementById("play-form");
    if (!form || form.dataset.ready) { return; }
    form.dataset.ready = "1";
    conversation = [];
    generation += 1;
    document.getElementById("play-reset").addEventListener("click", function () {
      conversation = [];
      generation += 1;
      document.getElementById("transcript").textContent = "";
      document.getElementById("play-message").focus();
    });
    form.addEventListener("submit", function (e) {
      e.preventDefault();
      var message = document.getElementById("play-message");
      var text = message.value.trim();
      if (!text) { return; }
      message.value = "";
      send(text);
    });
  }

  function element(tag, attrs, text) {
    var el = document.createElement(tag);
    for (var k in attrs) { el.setAttribute(k, attrs[k]); }
    if (text !== undefined) { el.textContent = text; }
    return el;
  }

  function apply(op, asked) {
    if (asked !== generation) { return; }
    var target = document.getElementById(op.target);
    if (op.op === "done") {
      if (op.content) { conversation.push({ role: "assistant", content: op.content }); }
      return;
    }
    if (!target) { return; }
    if (op.op === "text" || op.op === "progress") {
      if (op.op === "progress") { target.textContent = op.text; }
      else { target.hidden = false; target.appendChild(document.createTextNode(op.text)); }
    } else if (op.op === "append") {
      target.insertAdjacentHTML("beforeend", op.html);
    } else if (op.op === "replace") {
      target.outerHTML = op.html;
    }
  }

  // A message the gateway did not take: out of the conversation and the page.
  function forget(item, asked) {
    item.remove();
    if (asked === generation) { conversation.pop(); }
  }

  function send(text) {
    var turn = nextTurn;
    nextTurn += 1;
    var asked = generation;
    conversation.push({ role: "user", content: text });
    var transcript = document.getElementById("transcript");
    var item = element("li", { id: "t" + turn, "class": "turn" });
    item.appendChild(element("p", { "class": "user" }, text));
    item.appendChild(element("p", { id: "t" + turn + "-reasoning", "class": "reasoning", hidden: "" }));
    item.appendChild(element("div", { id: "t" + turn + "-cards", "class": "cards" }));
    item.appendChild(element("p", { id: "t" + turn + "-answer", "class": "answer" }));
    transcript.appendChild(item);
    var button = document.getElementById("play-send");
    button.disabled = true;
    alertBox("");
    var body = JSON.stringify({
      model: document.getElementById("play-model").value,
      tool_set: document.getElementById("play-set").value,
      messages: conversation,
      turn: turn
    });
    fetch("/console/ui/play", {
      method: "POST",
      headers: headers({ "Content-Type": "application/json" }),
      body: body
    }).then(function (response) {
      if (!response.ok) {
        return response.text().then(function (t) {
          forget(item, asked);
          alertBox(errorText(response.status, t));
        });
      }
      var reader = response.body.getReader();
      var decoder = new TextDecoder();
      var buffer = "";
      function pump() {
        return reader.read().then(function (chunk) {
          if (chunk.done) { return; }
          buffer += decoder.decode(chunk.value, { stream: true });
          var lines = buffer.split("\n");
          buffer = lines.pop();
          lines.forEach(function (line) { if (line) { apply(JSON.parse(line), asked); } });
          return pump();
        });
      }
      return pump();
    }).catch(function () {
      forget(item, asked);
      alertBox("The gateway could not be reached.");
    }).finally(function () {
      button.disabled = false;
      document.getElementById("play-message").focus();
    });
  }

  // MCP Apps: this page hosts a tool's interface (MCP Apps protocol
  // 2026-01-26, JSON-RPC over postMessage). The interface runs in
  // /console/app-frame, sandboxed without allow-same-origin; it gets the
  // call's arguments and result, may call the tools of its own server
  // (through the gateway, with this tab's key) and may log here. Nothing
  // else is offered: other requests get "method not found".
  var APP_PROTOCOLS = ["2026-01-26", "2025-11-21"];
  var APP_MAX_HEIGHT = 2000;

  function setUpApps() {
    var holders = document.querySelectorAll(".mcp-app:not([data-ready])");
    Array.prototype.forEach.call(holders, function (holder) {
      holder.dataset.ready = "1";
      var section = holder.closest("section.app");
      var data = JSON.parse(holder.dataset.app);
      startApp(holder, section.querySelector(".app-log"), data);
    });
  }

  function startApp(holder, log, data) {
    var frame = element("iframe", {
      "sandbox": "allow-scripts",
      "src": holder.dataset.frame,
      "title": "MCP App " + data.uri,
      "class": "app-frame"
    });
    holder.appendChild(frame);
    var handed = false;

    function post(message) {
      if (frame.contentWindow) { frame.contentWindow.postMessage(message, "*"); }
    }
    function reply(id, result) { post({ jsonrpc: "2.0", id: id, result: result }); }
    function fail(id, code, message) {
      post({ jsonrpc: "2.0", id: id, error: { code: code, message: message } });
    }
    function notify(method, params) { post({ jsonrpc: "2.0", method: method, params: params }); }
    function note(level, text) {
      var item = element("li", { "class": "app-log-" + level }, text);
      log.appendChild(item);
    }

    function callTool(id, params) {
      params = params || {};
      fetch("/console/ui/apps/call", {
        method: "POST",
        headers: headers({ "Content-Type": "application/json" }),
        body: JSON.stringify({ tool: data.tool.name, name: String(params.name), arguments: params.arguments || {} })
      }).then(function (response) {
        return response.text().then(function (text) {
          if (response.ok) { reply(id, JSON.parse(text)); }
          else { fail(id, -32603, errorText(response.status, text)); }
        });
      }).catch(function () { fail(id, -32603, "The gateway could not be reached."); });
    }

    function onMessage(e) {
      if (!frame.isConnected) { window.removeEventListener("message", onMessage); return; }
      if (e.source !== frame.contentWindow) { return; }
      var m = e.data;
      if (m && m.type === "toolgate/app-frame-ready" && !handed) {
        handed = true;
        post({ type: "toolgate/app-html", html: data.html });
        return;
      }
      if (!m || m.jsonrpc !== "2.0" || typeof m.method !== "string") { return; }
      var asks = m.id !== undefined && m.id !== null;
      var params = m.params || {};
      switch (m.method) {
        case "ui/initialize":
          reply(m.id, {
            protocolVersion: APP_PROTOCOLS.indexOf(params.protocolVersion) >= 0 ? params.protocolVersion : APP_PROTOCOLS[0],
            hostInfo: { name: "toolgate-console", version: "1" },
            hostCapabilities: { serverTools: {}, logging: {} },
            hostContext: {
              toolInfo: { tool: data.tool },
              theme: window.matchMedia("(prefers-color-scheme: dark)").matches ? "dark" : "light",
              displayMode: "inline",
              availableDisplayModes: ["inline"],
              containerDimensions: { maxHeight: APP_MAX_HEIGHT },
              locale: navigator.language,
              platform: "web"
            }
          });
          break;
        case "ui/notifications/initialized":
          notify("ui/notifications/tool-input", { arguments: data.arguments || {} });
          notify("ui/notifications/tool-result", data.result);
          break;
        case "tools/call":
          if (asks) { callTool(m.id, params); }
          break;
        case "ui/notifications/size-changed":
          if (typeof params.height === "number") {
            frame.style.height = Math.max(40, Math.min(APP_MAX_HEIGHT, Math.ceil(params.height))) + "px";
          }
          break;
        case "notifications/message":
          note(String(params.level || "info"), typeof params.data === "string" ? params.data : JSON.stringify(params.data));
          break;
        case "ui/request-display-mode":
          if (asks) { reply(m.id, { mode: "inline" }); }
          break;
        case "ping":
          if (asks) { reply(m.id, {}); }
          break;
        default:
          if (asks) { fail(m.id, -32601, "the toolgate console does not offer " + m.method); }
          else if (m.method.indexOf("ui/") === 0 || m.method.indexOf("notifications/") === 0) { /* nothing to do */ }
      }
    }
    window.addEventListener("message", onMessage);
  }

  document.addEventListener("DOMContentLoaded", function () {
    setUpKeyForm();
    if (document.body.dataset.keys === "open" || key()) {
      load("/console/ui/catalog");
    } else {
      document.getElementById("main").textContent = "Enter an API key that may use the console.";
      document.getElementById("api-key").focus();
    }
  });
})();
