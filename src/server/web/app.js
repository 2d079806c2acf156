// The chat page of `m3 serve` (docs/SERVER.md, "Chat page"): conversations kept in the browser's
// localStorage, replies streamed from /v1/chat/completions (SSE), reasoning folded, tool calls
// shown, images and videos attached by file picker or drag and drop (sent as data: URLs), the
// sampling and reasoning settings, and a stop button. Plain script, no build step.
(function () {
  'use strict';
  const $ = (id) => document.getElementById(id);
  const STORE = 'm3.conversations', SETTINGS = 'm3.settings';
  const SETTING_IDS = ['api-key', 'system', 'thinking', 'effort', 'budget', 'temperature', 'top-p', 'top-k', 'max-tokens', 'extra'];

  let conversations = load(STORE, []);
  let current = null;      // the conversation shown
  let attachments = [];    // {name, kind: 'image'|'video', url: data URL} for the next message
  let abort = null;        // the AbortController of the reply streaming now
  let model = null;        // the served model's id (GET /v1/models)

  function load(key, fallback) {
    try {
      const v = JSON.parse(localStorage.getItem(key));
      return v === null ? fallback : v;
    } catch (e) {
      return fallback;
    }
  }
  function save() {
    try {
      localStorage.setItem(STORE, JSON.stringify(conversations));
    } catch (e) {  // over the quota (large images): keep the text, drop the media of older messages
      for (const c of conversations) for (const m of c.messages) if (m !== last(current.messages)) m.media = [];
      try { localStorage.setItem(STORE, JSON.stringify(conversations)); } catch (e2) { status('could not save: ' + e2.message); }
    }
  }
  function last(a) { return a[a.length - 1]; }
  function status(text) { $('status').textContent = text; }
  function headers() {
    const h = { 'Content-Type': 'application/json' };
    const key = $('api-key').value.trim();
    if (key) h.Authorization = 'Bearer ' + key;
    return h;
  }

  // ---- settings ----
  function loadSettings() {
    const s = load(SETTINGS, {});
    for (const id of SETTING_IDS) if (s[id] !== undefined) $(id).value = s[id];
  }
  function saveSettings() {
    const s = {};
    for (const id of SETTING_IDS) s[id] = $(id).value;
    localStorage.setItem(SETTINGS, JSON.stringify(s));
  }
  function number(id) {
    const v = $(id).value.trim();
    return v === '' ? undefined : Number(v);
  }

  // ---- conversations ----
  function newConversation() {
    current = { id: String(Date.now()) + Math.random().toString(16).slice(2, 6), title: 'New chat', messages: [] };
    conversations.unshift(current);
    save();
    renderAll();
  }
  function renderList() {
    const ul = $('conversations');
    ul.textContent = '';
    for (const c of conversations) {
      const li = document.createElement('li');
      if (c === current) li.className = 'active';
      const span = document.createElement('span');
      span.textContent = c.title;
      li.appendChild(span);
      const del = document.createElement('button');
      del.textContent = '\u00d7';
      del.title = 'Delete';
      del.onclick = (ev) => {
        ev.stopPropagation();
        conversations = conversations.filter((x) => x !== c);
        if (current === c) current = conversations[0] || null;
        if (!current) return newConversation();
        save();
        renderAll();
      };
      li.appendChild(del);
      li.onclick = () => { if (!abort) { current = c; renderAll(); } };
      ul.appendChild(li);
    }
  }

  // ---- messages ----
  function renderMessage(m) {
    const div = document.createElement('div');
    div.className = 'msg ' + m.role;
    const who = document.createElement('div');
    who.className = 'who';
    who.textContent = m.role === 'user' ? 'You' : (model || 'assistant');
    div.appendChild(who);
    for (const a of m.media || []) {
      const el = document.createElement(a.kind === 'video' ? 'video' : 'img');
      el.className = 'thumb';
      el.src = a.url;
      el.title = a.name;
      if (a.kind === 'video') el.controls = true;
      div.appendChild(el);
    }
    if (m.reasoning) {
      const d = document.createElement('details');
      d.className = 'reasoning';
      const sum = document.createElement('summary');
      sum.textContent = 'Reasoning (' + m.reasoning.length + ' characters)';
      const t = document.createElement('div');
      t.className = 'reasoning-text';
      t.textContent = m.reasoning;
      d.appendChild(sum);
      d.appendChild(t);
      div.appendChild(d);
    }
    const content = document.createElement('div');
    content.className = 'content';
    if (m.role === 'user') content.textContent = m.content;
    else content.innerHTML = window.renderMarkdown(m.content || '');
    div.appendChild(content);
    for (const call of m.tool_calls || []) {
      const box = document.createElement('div');
      box.className = 'tool-call';
      box.textContent = 'tool call: ' + call.function.name;
      const pre = document.createElement('pre');
      let args = call.function.arguments;
      try { args = JSON.stringify(JSON.parse(args), null, 2); } catch (e) { /* partial: as streamed */ }
      pre.textContent = args;
      box.appendChild(pre);
      div.appendChild(box);
    }
    if (m.error) {
      const e = document.createElement('div');
      e.className = 'error';
      e.textContent = m.error;
      div.appendChild(e);
    }
    if (m.stopped) {
      const s = document.createElement('div');
      s.className = 'stopped';
      s.textContent = '(stopped)';
      div.appendChild(s);
    }
    div.dataset.state = m.state || 'done';
    return div;
  }
  function renderMessages() {
    const box = $('messages');
    box.textContent = '';
    for (const m of current.messages) box.appendChild(renderMessage(m));
    box.scrollTop = box.scrollHeight;
  }
  // While a reply streams, its message is drawn once per frame, and at least every 100 ms when
  // frames do not come (the reading loop can run on without yielding to a frame while chunks are
  // queued). A fast model sends hundreds of chunks a second: drawing (markdown included) after
  // each one kept the page busy enough that a click on Stop was not handled until the reply ended.
  let frameRequested = false, lastDrawn = 0;
  function drawLast() {
    lastDrawn = performance.now();
    updateLast();
  }
  function updateLastSoon() {
    if (performance.now() - lastDrawn > 100) return drawLast();
    if (frameRequested) return;
    frameRequested = true;
    requestAnimationFrame(() => { frameRequested = false; drawLast(); });
  }
  function updateLast() {
    const box = $('messages');
    const el = renderMessage(last(current.messages));
    const old = box.lastElementChild;
    // Keep a reasoning block the user opened open while it streams.
    if (old && old.querySelector('details.reasoning') && el.querySelector('details.reasoning'))
      el.querySelector('details.reasoning').open = old.querySelector('details.reasoning').open;
    if (old) box.replaceChild(el, old);
    else box.appendChild(el);
    box.scrollTop = box.scrollHeight;
  }
  function renderAttachments() {
    const box = $('attachments');
    box.textContent = '';
    attachments.forEach((a, i) => {
      const chip = document.createElement('span');
      chip.className = 'chip';
      chip.textContent = a.kind + ': ' + a.name + ' ';
      const x = document.createElement('button');
      x.type = 'button';
      x.textContent = '\u00d7';
      x.onclick = () => { attachments.splice(i, 1); renderAttachments(); };
      chip.appendChild(x);
      box.appendChild(chip);
    });
  }
  function renderAll() {
    renderList();
    renderMessages();
    renderAttachments();
  }

  // ---- attachments ----
  function attachFiles(files) {
    for (const f of files) {
      const kind = f.type.startsWith('video/') ? 'video' : f.type.startsWith('image/') ? 'image' : null;
      if (!kind) { status(f.name + ': not an image or a video'); continue; }
      const r = new FileReader();
      r.onload = () => { attachments.push({ name: f.name, kind: kind, url: r.result }); renderAttachments(); };
      r.readAsDataURL(f);
    }
  }

  // ---- requests ----
  function apiMessages() {
    const out = [];
    const system = $('system').value.trim();
    if (system) out.push({ role: 'system', content: system });
    for (const m of current.messages) {
      if (m.role === 'user') {
        if (m.media && m.media.length) {
          const parts = m.media.map((a) => a.kind === 'video' ? { type: 'video_url', video_url: { url: a.url } }
                                                             : { type: 'image_url', image_url: { url: a.url } });
          parts.push({ type: 'text', text: m.content });
          out.push({ role: 'user', content: parts });
        } else {
          out.push({ role: 'user', content: m.content });
        }
      } else if (m.state !== 'error') {
        const a = { role: 'assistant', content: m.content || '' };
        if (m.reasoning) a.reasoning_content = m.reasoning;
        if (m.tool_calls && m.tool_calls.length) a.tool_calls = m.tool_calls;
        out.push(a);
      }
    }
    return out;
  }

  function requestBody() {
    const body = { model: model || undefined, messages: apiMessages(), stream: true };
    const t = number('temperature'), p = number('top-p'), k = number('top-k'), n = number('max-tokens'), b = number('budget');
    if (t !== undefined) body.temperature = t;
    if (p !== undefined) body.top_p = p;
    if (k !== undefined) body.top_k = k;
    if (n !== undefined) body.max_tokens = n;
    if (b !== undefined) body.reasoning_effort = b;
    else if ($('effort').value) body.reasoning_effort = $('effort').value;
    if ($('thinking').value) body.chat_template_kwargs = { thinking_mode: $('thinking').value };
    // Any other field of the API (seed, stop, logit_bias, ignore_eos, ...), over the ones above.
    const extra = $('extra').value.trim();
    if (extra) {
      let more;
      try { more = JSON.parse(extra); } catch (e) { throw new Error('More request fields: not valid JSON: ' + e.message); }
      if (typeof more !== 'object' || more === null || Array.isArray(more)) throw new Error('More request fields: expected a JSON object');
      Object.assign(body, more);
    }
    return body;
  }

  async function send(text) {
    const user = { role: 'user', content: text, media: attachments };
    attachments = [];
    current.messages.push(user);
    if (current.title === 'New chat') current.title = text.slice(0, 40) || 'Chat';
    const reply = { role: 'assistant', content: '', reasoning: '', tool_calls: [], state: 'streaming' };
    current.messages.push(reply);
    save();
    renderAll();
    abort = new AbortController();
    $('send').disabled = true;
    $('stop').disabled = false;
    status('generating...');
    const started = performance.now();
    let tokens = 0;
    try {
      const res = await fetch('/v1/chat/completions', { method: 'POST', headers: headers(),
                                                         body: JSON.stringify(requestBody()), signal: abort.signal });
      if (!res.ok) {
        let msg = 'HTTP ' + res.status;
        try { msg += ': ' + (await res.json()).error.message; } catch (e) { /* not JSON */ }
        throw new Error(msg);
      }
      const reader = res.body.getReader();
      const decoder = new TextDecoder();
      let buf = '';
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buf += decoder.decode(value, { stream: true });
        let cut;
        while ((cut = buf.indexOf('\n\n')) >= 0) {
          const event = buf.slice(0, cut);
          buf = buf.slice(cut + 2);
          for (const line of event.split('\n')) {
            if (!line.startsWith('data: ')) continue;
            const data = line.slice(6);
            if (data === '[DONE]') continue;
            const obj = JSON.parse(data);
            if (obj.error) throw new Error(obj.error.message);
            for (const ch of obj.choices || []) {
              const d = ch.delta || {};
              if (d.reasoning_content) reply.reasoning += d.reasoning_content;
              if (d.content) reply.content += d.content;
              for (const tc of d.tool_calls || []) {
                const slot = reply.tool_calls[tc.index] || (reply.tool_calls[tc.index] =
                  { id: tc.id || '', type: 'function', function: { name: '', arguments: '' } });
                if (tc.id) slot.id = tc.id;
                if (tc.function && tc.function.name) slot.function.name += tc.function.name;
                if (tc.function && tc.function.arguments) slot.function.arguments += tc.function.arguments;
              }
              if (d.content || d.reasoning_content) tokens++;
            }
            updateLastSoon();
          }
        }
      }
      reply.state = 'done';
      const s = (performance.now() - started) / 1000;
      status(tokens + ' chunks in ' + s.toFixed(1) + ' s');
    } catch (e) {
      if (e.name === 'AbortError') {
        reply.state = 'stopped';
        reply.stopped = true;
        status('stopped');
      } else {
        reply.state = 'error';
        reply.error = e.message;
        status('error');
      }
    }
    abort = null;
    $('send').disabled = false;
    $('stop').disabled = true;
    save();
    updateLast();
    renderList();
  }

  // ---- wiring ----
  $('composer').addEventListener('submit', (ev) => {
    ev.preventDefault();
    const text = $('input').value.trim();
    if ((!text && !attachments.length) || abort) return;
    $('input').value = '';
    send(text);
  });
  $('input').addEventListener('keydown', (ev) => {
    if (ev.key === 'Enter' && !ev.shiftKey) {
      ev.preventDefault();
      $('composer').requestSubmit();
    }
  });
  $('stop').onclick = () => { if (abort) abort.abort(); };
  $('new-chat').onclick = () => { if (!abort) newConversation(); };
  $('file').addEventListener('change', (ev) => { attachFiles(ev.target.files); ev.target.value = ''; });
  for (const id of SETTING_IDS) $(id).addEventListener('change', saveSettings);
  let depth = 0;
  document.addEventListener('dragenter', (ev) => { ev.preventDefault(); depth++; document.body.classList.add('dragging'); });
  document.addEventListener('dragleave', () => { if (--depth <= 0) { depth = 0; document.body.classList.remove('dragging'); } });
  document.addEventListener('dragover', (ev) => ev.preventDefault());
  document.addEventListener('drop', (ev) => {
    ev.preventDefault();
    depth = 0;
    document.body.classList.remove('dragging');
    attachFiles(ev.dataTransfer.files);
  });

  async function loadModel() {
    try {
      const res = await fetch('/v1/models', { headers: headers() });
      if (!res.ok) {
        $('model-info').textContent = res.status === 401 ? 'Set the API key in Settings.' : 'GET /v1/models: HTTP ' + res.status;
        return;
      }
      const m = (await res.json()).data[0];
      model = m.id;
      $('model-info').textContent = 'model ' + m.id + ', context ' + m.context_length + ' tokens';
    } catch (e) {
      $('model-info').textContent = 'server unreachable: ' + e.message;
    }
  }
  $('api-key').addEventListener('change', loadModel);

  loadSettings();
  current = conversations[0] || null;
  if (!current) newConversation();
  else renderAll();
  loadModel();
})();
