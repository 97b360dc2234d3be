// dispatch dashboard. Plain JS, no framework, no build step.
//
// Rules this file keeps (the page runs under a strict CSP and shows
// strings that tasks control): no string is ever parsed as HTML, no
// inline styles, no eval.
// Every piece of text goes in through textContent or a text node; links
// are built from encodeURIComponent'ed names.
'use strict';

(function () {
  const PAGE = 200;          // task rows per page
  const GRAPH_MAX = 300;     // larger graphs are not drawn
  const LOG_MAX = 1 << 20;   // characters of log kept on the page
  const DEBOUNCE = 250;      // ms from an event to the re-fetch
  const POLL = 15000;        // ms: a slow re-fetch in case an event is missed
  const STATUSES = ['pending', 'claimed', 'running', 'completed', 'failed', 'blocked', 'canceled'];

  const view = document.getElementById('view');
  const live = document.getElementById('live');
  // lastEvent remembers, per project and task, the newest event seen on the
  // stream since the page loaded (the "last event" column).
  const lastEvent = new Map();
  let current = null;        // the view on screen: {onEvent, stop}

  // ---- DOM and formatting helpers

  function el(tag, props, ...kids) {
    const e = document.createElement(tag);
    setProps(e, props);
    for (const k of kids.flat(Infinity)) {
      if (k === null || k === undefined || k === false) continue;
      e.append(typeof k === 'object' ? k : String(k));
    }
    return e;
  }

  function setProps(e, props) {
    if (!props) return;
    for (const [k, v] of Object.entries(props)) {
      if (v === null || v === undefined) continue;
      if (k === 'class') e.className = v;
      else if (k === 'text') e.textContent = String(v);
      else if (k === 'data') Object.assign(e.dataset, v);
      else if (k.startsWith('on')) e.addEventListener(k.slice(2), v);
      else e.setAttribute(k, String(v));
    }
  }

  const SVG = 'http://www.w3.org/2000/svg';
  function svg(tag, attrs, ...kids) {
    const e = document.createElementNS(SVG, tag);
    for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, String(v));
    for (const k of kids) e.append(k);
    return e;
  }

  function enc(s) { return encodeURIComponent(s); }
  function projectHref(p, tab) { return '#/p/' + enc(p) + (tab ? '/' + tab : ''); }
  function taskHref(p, id) { return '#/p/' + enc(p) + '/t/' + enc(id); }

  function stateSpan(s, extra) {
    const word = s || '—';
    return el('span', { class: 'state s-' + String(s || 'none').replace(/[^a-z_-]/gi, ''), text: word + (extra || '') });
  }

  function fmtDur(sec) {
    if (sec > 0 && sec < 1) return '<1s';
    sec = Math.max(0, Math.round(sec));
    const d = Math.floor(sec / 86400), h = Math.floor(sec / 3600) % 24, m = Math.floor(sec / 60) % 60, s = sec % 60;
    if (d) return d + 'd' + String(h).padStart(2, '0') + 'h';
    if (h) return h + 'h' + String(m).padStart(2, '0') + 'm';
    if (m) return m + 'm' + String(s).padStart(2, '0') + 's';
    return s + 's';
  }
  function parseTime(iso) { const t = iso ? Date.parse(iso) : NaN; return isNaN(t) ? null : t; }
  function fmtTime(iso) {
    const t = parseTime(iso);
    return t === null ? '' : new Date(t).toLocaleString(undefined, { dateStyle: 'short', timeStyle: 'medium' });
  }
  function fmtUSD(x) { x = Number(x) || 0; return '$' + (x === 0 ? '0' : x < 1 ? x.toFixed(4) : x.toFixed(2)); }
  function fmtNum(n) {
    n = Number(n) || 0;
    if (n >= 1e6) return (n / 1e6).toFixed(1) + 'M';
    if (n >= 1e4) return (n / 1e3).toFixed(1) + 'k';
    return String(n);
  }
  function fmtBytes(n) {
    n = Number(n) || 0;
    const u = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
    let i = 0;
    while (n >= 1024 && i < u.length - 1) { n /= 1024; i++; }
    return (i ? n.toFixed(1) : n) + ' ' + u[i];
  }

  // timer returns a span kept up to date each second: mode "since" shows
  // how long ago iso was, "for" the same without "ago", "until" how long
  // until it (or `done` once due).
  function timer(iso, mode, prefix, done) {
    const t = parseTime(iso);
    if (t === null) return el('span', { class: 'muted', text: '' });
    const s = el('span', { class: 'timer', data: { t: String(t), mode: mode, prefix: prefix || '', done: done || 'now' } });
    tickOne(s, Date.now());
    return s;
  }
  function tickOne(s, now) {
    const t = Number(s.dataset.t), p = s.dataset.prefix;
    if (s.dataset.mode === 'since') s.textContent = p + fmtDur((now - t) / 1000) + ' ago';
    else if (s.dataset.mode === 'for') s.textContent = p + fmtDur((now - t) / 1000);
    else s.textContent = t > now ? p + 'in ' + fmtDur((t - now) / 1000) : s.dataset.done;
  }
  setInterval(() => {
    const now = Date.now();
    for (const s of document.querySelectorAll('span.timer')) tickOne(s, now);
  }, 1000);

  function table(headers, rows) {
    const head = el('tr', null, headers.map(h => {
      const num = h.startsWith('#');
      return el('th', { class: num ? 'num' : null, text: num ? h.slice(1) : h });
    }));
    return el('table', null, el('thead', null, head), el('tbody', null, rows));
  }
  function td(content, cls) { return el('td', { class: cls || null }, content); }
  function card(k, v) { return el('div', { class: 'card' }, el('div', { class: 'k', text: k }), el('div', { class: 'v' }, v)); }

  // ---- API

  async function api(path) {
    const r = await fetch('/api/v1/' + path, { credentials: 'same-origin', headers: { Accept: 'application/json' } });
    if (r.status === 401) throw new Error('not authorised: open the address with ?token=… that dispatch serve printed');
    if (!r.ok) throw new Error(path + ': ' + r.status + ' ' + (await r.text()).slice(0, 300));
    return r.json();
  }

  // refresher runs fn at most once per DEBOUNCE after kick(), never two at
  // a time, and once more if kicked while running.
  function refresher(fn, errBox, delay) {
    let timer = null, running = false, again = false, stopped = false;
    async function run() {
      timer = null;
      if (stopped) return;
      if (running) { again = true; return; }
      running = true;
      try {
        await fn();
        if (errBox) errBox.replaceChildren();
      } catch (e) {
        if (errBox) errBox.replaceChildren(el('p', { class: 'error', text: String(e.message || e) }));
      } finally {
        running = false;
      }
      if (again) { again = false; kick(); }
    }
    function kick() { if (!stopped && !timer) timer = setTimeout(run, delay === undefined ? DEBOUNCE : delay); }
    return { kick, run, stop() { stopped = true; clearTimeout(timer); } };
  }

  // ---- the event stream

  let es = null;
  function connect() {
    es = new EventSource('/api/v1/events');
    es.onopen = () => { live.textContent = 'live'; live.className = 'live on'; };
    es.onerror = () => {
      live.textContent = 'reconnecting'; live.className = 'live off';
      // EventSource retries by itself unless the server refused it.
      if (es.readyState === EventSource.CLOSED) { es = null; setTimeout(connect, 3000); }
    };
    es.onmessage = (m) => {
      let ev;
      try { ev = JSON.parse(m.data); } catch (e) { return; }
      if (ev.task) lastEvent.set(ev.project + '\u0000' + ev.task, ev);
      if (current && current.onEvent) current.onEvent(ev);
    };
  }

  // ---- is a controller running?

  // Without a controller nothing is collected: a task shown running may
  // have ended long ago. The banner says so, since when, and what resumes.
  const stale = document.getElementById('stale');
  const watcher = refresher(async () => {
    const c = await api('controller');
    if (c.running || !c.last_seen) { stale.hidden = true; return; }
    if (c.frozen) {
      stale.replaceChildren('The controller is stopped (pid ' + c.pid + ' is frozen: SIGSTOP or Ctrl-Z; last tick ' +
        fmtTime(c.last_seen) + '): what you see is what it last saw. ', el('code', { text: 'kill -CONT ' + c.pid }), ' resumes it.');
      stale.hidden = false;
      return;
    }
    stale.replaceChildren('No controller is running (last tick ' + fmtTime(c.last_seen) +
      '): what you see is what it last saw. ', el('code', { text: 'dispatch start <project>' }), ' or ',
      el('code', { text: 'dispatch serve' }), ' resumes and collects what finished.');
    stale.hidden = false;
  }, null, 0);

  // ---- routing

  function route() {
    if (current && current.stop) current.stop();
    let parts;
    try {
      parts = location.hash.replace(/^#\/?/, '').split('/').filter(Boolean).map(decodeURIComponent);
    } catch (e) {
      parts = [];
    }
    for (const a of document.querySelectorAll('header nav a')) a.classList.remove('current');
    const nav = document.getElementById('nav-' + (parts[0] === 'nodes' || parts[0] === 'schedules' ? parts[0] : 'projects'));
    if (nav) nav.classList.add('current');
    view.replaceChildren();
    if (parts[0] === 'p' && parts[1] && parts[2] === 't' && parts[3]) current = taskView(parts[1], parts[3]);
    else if (parts[0] === 'p' && parts[1]) current = projectView(parts[1], parts[2] || 'tasks');
    else if (parts[0] === 'nodes') current = nodesView();
    else if (parts[0] === 'schedules') current = schedulesView();
    else current = projectsView();
  }

  // simpleView is a page that is one fetch and one render, re-fetched on
  // every event that relevant() accepts and every POLL.
  function simpleView(title, path, render, relevant, poll) {
    const err = el('div'), body = el('div', null, el('p', { class: 'muted', text: 'Loading…' }));
    view.append(el('h1', { text: title }), err, body);
    const r = refresher(async () => body.replaceChildren(render(await api(path))), err);
    r.run();
    const iv = setInterval(r.kick, poll || POLL);
    return {
      onEvent(ev) { if (!relevant || relevant(ev)) r.kick(); },
      stop() { r.stop(); clearInterval(iv); },
    };
  }

  // ---- projects

  function projectsView() {
    return simpleView('Projects', 'projects', (d) => {
      const ps = d.projects || [];
      if (!ps.length) return el('p', { class: 'muted', text: 'No projects yet: dispatch start <project> adds one.' });
      return table(['Project', 'State', 'Phase', 'Progress', '#Cost', '#Tokens in/out', 'Started', 'Next schedule', 'Budget', 'Notes'],
        ps.map(projectRow));
    });
  }

  function projectRow(p) {
    const c = p.counts || {};
    const done = (c.completed || 0);
    const progress = el('span', null,
      el('meter', { min: 0, max: Math.max(1, p.tasks || 0), value: done }), ' ',
      done + '/' + (p.tasks || 0),
      c.running ? el('span', { class: 's-running', text: ' · ' + c.running + ' running' }) : null,
      c.failed ? el('span', { class: 's-failed', text: ' · ' + c.failed + ' failed' }) : null,
      c.blocked ? el('span', { class: 's-blocked', text: ' · ' + c.blocked + ' blocked' }) : null);
    return el('tr', { data: { project: p.project } },
      td(el('a', { href: projectHref(p.project), text: p.project })),
      td([stateSpan(p.state), p.result ? [' ', stateSpan(p.result)] : null, p.run ? el('span', { class: 'muted', text: ' run ' + p.run }) : null]),
      td(p.phase || ''),
      td(progress),
      td(fmtUSD(p.cost_usd), 'num'),
      td(fmtNum(p.tokens_in) + ' / ' + fmtNum(p.tokens_out), 'num'),
      td(timer(p.started_at, 'since')),
      td(p.next_schedule ? timer(p.next_schedule, 'until', '', 'due') : ''),
      td(budgetBurn(p.budget)),
      td(notesList(p)));
  }

  // budgetBurn is a meter of the budget's spend: dollars, or tokens when
  // the budget counts only tokens.
  function budgetBurn(b) {
    if (!b) return el('span', { class: 'muted', text: '—' });
    const usd = !!b.limit_usd || !b.limit_tokens;
    const limit = usd ? b.limit_usd || 0 : b.limit_tokens, spent = usd ? b.spent_usd || 0 : b.spent_tokens || 0;
    const fmt = usd ? fmtUSD : (n) => fmtNum(n) + ' tokens';
    return el('span', { class: b.stopped ? 's-failed' : null, title: b.summary || '' },
      el('meter', { min: 0, max: Math.max(limit, 0.0001), value: spent, high: limit * 0.8 }), ' ',
      fmt(spent) + ' of ' + fmt(limit) + (b.stopped ? ' — stopped' + (b.summary ? ': ' + b.summary : '') : ''));
  }

  function pauseItems(paused) {
    return (paused || []).map(z => el('li', { class: 'warn' },
      'paused: ' + (z.api_mode || 'api') + ' rate limit, resets ', timer(z.until, 'until', '', 'now'),
      z.reason ? ' (' + z.reason + ')' : '', z.fallback ? ' — falls back to ' + z.fallback : ''));
  }

  function notesList(p) {
    const items = [];
    if (p.problem) items.push(el('li', { class: 'error', text: p.problem }));
    items.push(...pauseItems(p.paused));
    for (const n of p.notes || []) items.push(el('li', { text: n }));
    return items.length ? el('ul', { class: 'notes' }, items) : '';
  }

  // ---- one project: summary, then a tab

  function projectView(p, tab) {
    const head = el('div'), err = el('div'), body = el('div');
    const tabs = el('nav', { class: 'tabs' }, ['tasks', 'graph', 'integration', 'runs'].map(t =>
      el('a', { href: projectHref(p, t === 'tasks' ? '' : t), class: t === tab ? 'current' : null, text: t[0].toUpperCase() + t.slice(1) })));
    const acts = el('div', { class: 'actions', id: 'project-actions' });
    view.append(el('h1', null, el('a', { href: '#/', text: 'Projects' }), ' / ', p), err, acts, head, tabs, body);
    let summary = null;
    const sum = refresher(async () => {
      summary = await api('projects/' + enc(p) + '/summary');
      head.replaceChildren(summaryCards(summary));
      window.dispatchActions.project(acts, p, summary, () => { sum.kick(); t.kick(); });
    }, err);
    sum.run();
    const tabView = { tasks: tasksTab, graph: graphTab, integration: integrationTab, runs: runsTab }[tab] || tasksTab;
    const t = tabView(p, body, () => summary);
    const iv = setInterval(() => { sum.kick(); t.kick(); }, POLL);
    return {
      onEvent(ev) {
        if (ev.project !== p) return;
        sum.kick();
        if (!t.relevant || t.relevant(ev)) t.kick();
      },
      stop() { sum.stop(); t.stop(); clearInterval(iv); },
    };
  }

  function summaryCards(s) {
    const c = s.counts || {};
    const cards = el('div', { class: 'cards' },
      card('State', [stateSpan(s.state), s.result ? [' ', stateSpan(s.result)] : null]),
      card('Run', s.run ? String(s.run) : '—'),
      card('Phase', s.phase || '—'),
      card('Done', (c.completed || 0) + ' / ' + (s.tasks || 0)),
      card('Running', String((c.running || 0) + (c.claimed || 0))),
      card('Pending', String(c.pending || 0)),
      card('Failed', el('span', { class: c.failed ? 's-failed' : null, text: String(c.failed || 0) })),
      card('Blocked / canceled', (c.blocked || 0) + ' / ' + (c.canceled || 0)),
      card('Conflicts', s.conflicts ? el('a', { href: projectHref(s.project, 'integration'), text: String(s.conflicts) }) : '0'),
      card('Cost', fmtUSD(s.cost_usd)),
      card('Tokens in / out', fmtNum(s.tokens_in) + ' / ' + fmtNum(s.tokens_out)),
      card('Started', s.started_at ? timer(s.started_at, 'since') : '—'),
      card(s.finished_at ? 'Took' : 'Next schedule', s.finished_at
        ? fmtDur((parseTime(s.finished_at) - parseTime(s.started_at)) / 1000)
        : (s.next_schedule ? timer(s.next_schedule, 'until', '', 'due') : '—')),
      card('Budget', budgetBurn(s.budget)));
    return el('div', null, cards, notesList(s));
  }

  // ---- tasks tab: a window of PAGE rows, never the whole run

  function tasksTab(p, body, summary) {
    let offset = 0, status = '', total = 0;
    const info = el('span', { class: 'muted' });
    const prev = el('button', { type: 'button', text: '‹ previous', onclick: () => { offset = Math.max(0, offset - PAGE); r.run(); } });
    const next = el('button', { type: 'button', text: 'next ›', onclick: () => { if (offset + PAGE < total) { offset += PAGE; r.run(); } } });
    const filter = el('select', { 'aria-label': 'status', onchange: () => { status = filter.value; offset = 0; r.run(); } },
      el('option', { value: '', text: 'all states' }), STATUSES.map(s => el('option', { value: s, text: s })));
    const err = el('div'), rows = el('tbody');
    const tbl = table(['ID', 'Title', 'State', 'Node', '#Attempt', 'API mode', '#Tokens', '#Cost', 'Age', 'Last event', 'Timers'], []);
    tbl.querySelector('tbody').replaceWith(rows);
    tbl.id = 'tasks';
    body.append(el('div', { class: 'toolbar' }, filter, prev, next, info), err, tbl);
    const r = refresher(async () => {
      const q = 'projects/' + enc(p) + '?offset=' + offset + '&limit=' + PAGE + (status ? '&status=' + enc(status) : '');
      const d = await api(q);
      let tasks = d.tasks || [];
      if (d.page) {
        total = d.page.total;
        if (status) tasks = tasks.filter(t => t.status === status);
      } else { // an unpaged answer: window it here
        if (status) tasks = tasks.filter(t => t.status === status);
        total = tasks.length;
        tasks = tasks.slice(offset, offset + PAGE);
      }
      const s = summary();
      rows.replaceChildren(...tasks.map(t => taskRow(p, t, s)));
      if (!tasks.length) rows.append(el('tr', null, el('td', { colspan: 11, class: 'muted', text: 'no tasks' + (status ? ' ' + status : '') })));
      info.textContent = total ? (offset + 1) + '–' + Math.min(offset + PAGE, total) + ' of ' + total : '';
      prev.disabled = offset === 0;
      next.disabled = offset + PAGE >= total;
    }, err);
    r.run();
    return r;
  }

  function taskRow(p, t, s) {
    const tokens = t.tokens_in !== undefined ? fmtNum((t.tokens_in || 0) + (t.tokens_out || 0)) : '';
    const cost = t.cost_usd !== undefined ? fmtUSD(t.cost_usd) : '';
    let age = '';
    if (t.status === 'running' || t.status === 'claimed') age = timer(t.started_at, 'for');
    else if (t.duration_seconds) age = fmtDur(t.duration_seconds);
    return el('tr', { data: { id: t.id } },
      td(el('a', { href: taskHref(p, t.id), text: t.id }), 'id'),
      td([el('span', { class: 'text', text: t.title || '' }),
        t.error ? el('div', { class: 'error', text: (t.error_class ? t.error_class + ': ' : '') + t.error }) : null], 'title'),
      td([stateSpan(t.waiting ? 'waiting' : t.status, t.gating ? ' (gate)' : ''),
        t.waiting ? el('div', { class: 'text', text: t.waiting }) : null], 'status'),
      td(t.node || '', 'node'),
      td(t.attempt ? String(t.attempt) + (t.preemptions ? ' (' + t.preemptions + ' preempted)' : '') : '', 'num'),
      td(t.api_mode || ''),
      td(tokens, 'num'),
      td(cost, 'num'),
      td(age),
      td(lastEventOf(p, t)),
      td(taskTimers(t, s)));
  }

  function lastEventOf(p, t) {
    const ev = lastEvent.get(p + '\u0000' + t.id) || (typeof t.last_event === 'object' ? t.last_event : null);
    if (!ev) return typeof t.last_event === 'string' ? t.last_event : '';
    const what = ev.kind + (ev.to ? ' → ' + ev.to : '');
    return el('span', { title: ev.message || '' }, what + ' ', timer(ev.time, 'since'));
  }

  function taskTimers(t, s) {
    const out = [];
    if ((t.status === 'running') && t.stall_seconds && (t.output_at || t.heartbeat_at)) {
      out.push(timer(stallAt(t), 'until', 'stall ', 'stalled'));
    }
    if (t.status === 'pending' && s && s.paused) {
      for (const z of s.paused) {
        if (!t.api_mode || z.api_mode === t.api_mode) out.push(el('span', { class: 'warn' }, (z.api_mode || 'api') + ' paused, resumes ', timer(z.until, 'until', '', 'now')));
      }
    }
    return out;
  }

  // ---- graph tab: layered by depth, drawn as SVG

  function graphTab(p, body) {
    const err = el('div'), box = el('div', null, el('p', { class: 'muted', text: 'Loading…' }));
    body.append(err, box);
    const r = refresher(async () => box.replaceChildren(drawGraph(p, await api('projects/' + enc(p) + '/graph'))), err, 500);
    r.run();
    r.relevant = (ev) => !!ev.task;
    return r;
  }

  function layers(tasks) {
    const byId = new Map(tasks.map(t => [t.id, t]));
    const depth = new Map();
    function d(id, seen) {
      if (depth.has(id)) return depth.get(id);
      if (seen.has(id)) return 0; // a cycle: the plan refuses those, but do not loop
      seen.add(id);
      let n = 0;
      for (const dep of byId.get(id).depends_on || []) if (byId.has(dep)) n = Math.max(n, d(dep, seen) + 1);
      depth.set(id, n);
      return n;
    }
    const out = [];
    for (const t of tasks) (out[d(t.id, new Set())] ||= []).push(t);
    // Order each layer by the mean row of its dependencies (fewer crossings).
    const row = new Map();
    out.forEach((layer, i) => {
      const key = (t) => {
        const ds = (t.depends_on || []).filter(x => row.has(x));
        return ds.length ? ds.reduce((a, x) => a + row.get(x), 0) / ds.length : -1;
      };
      if (i === 0) layer.sort((a, b) => a.id.localeCompare(b.id));
      else layer.sort((a, b) => key(a) - key(b) || a.id.localeCompare(b.id));
      layer.forEach((t, j) => row.set(t.id, j));
    });
    return { layers: out, row, depth };
  }

  function drawGraph(p, g) {
    const tasks = g.tasks || [];
    if (tasks.length > GRAPH_MAX) {
      return el('p', null, tasks.length + ' tasks: too many to draw (the limit is ' + GRAPH_MAX + '). ',
        el('a', { href: projectHref(p), text: 'See the table of tasks' }), '.');
    }
    if (!tasks.length) return el('p', { class: 'muted', text: 'no tasks' });
    const L = layers(tasks);
    const W = 104, H = 24, CW = 150, RH = 34, M = 10;
    const pos = (id) => ({ x: M + L.depth.get(id) * CW, y: M + L.row.get(id) * RH });
    const height = M * 2 + Math.max(...L.layers.map(l => l.length)) * RH - (RH - H);
    const width = M * 2 + (L.layers.length - 1) * CW + W;
    const root = svg('svg', { class: 'graph', width, height, viewBox: '0 0 ' + width + ' ' + height, role: 'img' });
    const edges = svg('g');
    const nodes = svg('g');
    for (const t of tasks) {
      const b = pos(t.id);
      for (const dep of t.depends_on || []) {
        if (!L.depth.has(dep)) continue;
        const a = pos(dep), x1 = a.x + W, y1 = a.y + H / 2, x2 = b.x, y2 = b.y + H / 2, mx = (x1 + x2) / 2;
        edges.append(svg('path', { class: 'edge', d: `M${x1},${y1} C${mx},${y1} ${mx},${y2} ${x2},${y2}` }));
      }
      const label = t.id.length > 14 ? t.id.slice(0, 13) + '…' : t.id;
      const title = svg('title');
      title.textContent = t.id + ': ' + t.status;
      const text = svg('text', { x: b.x + 6, y: b.y + 16 });
      text.textContent = label;
      const a = svg('a', { href: taskHref(p, t.id) },
        svg('g', { class: 'n-' + String(t.status).replace(/[^a-z]/g, ''), 'data-id': t.id },
          title, svg('rect', { x: b.x, y: b.y, width: W, height: H }), text));
      nodes.append(a);
    }
    root.append(edges, nodes);
    const counts = {};
    for (const t of tasks) counts[t.status] = (counts[t.status] || 0) + 1;
    const legend = el('p', { class: 'muted' }, tasks.length + ' tasks in ' + L.layers.length + ' layers (a task right of what it depends on): ',
      Object.entries(counts).map(([k, v]) => [stateSpan(k, ' ' + v), ' ']));
    return el('div', null, legend, el('div', { class: 'graphbox' }, root));
  }

  // ---- integration tab: merge → S99 → gate → V → F, from the report

  function integrationTab(p, body) {
    const err = el('div'), box = el('div', null, el('p', { class: 'muted', text: 'Loading…' }));
    body.append(err, box);
    const r = refresher(async () => box.replaceChildren(renderIntegration(p, await api('projects/' + enc(p) + '/report?tasks=phase'))), err, 500);
    r.run();
    // The report is the heaviest answer: re-fetch it for the phase's own
    // tasks and project-wide events only.
    r.relevant = (ev) => !ev.task || /^(S99|V\d|F\d)/.test(ev.task);
    return r;
  }

  function phaseSteps(rep) {
    const tasks = rep.tasks || [];
    const last = (re) => { const m = tasks.filter(t => re.test(t.id)); return m.length ? m[m.length - 1] : null; };
    const s99 = last(/^S99/), v = last(/^V\d/), f = last(/^F\d/);
    const ver = rep.verification || {};
    const gate = rep.gate && rep.gate.project && rep.gate.project.length ? rep.gate.project[rep.gate.project.length - 1] : null;
    const off = !s99 && rep.phase === 'done';
    const conflicts = (rep.conflicts || []).length;
    return [
      ['merge', off ? 'skipped' : rep.phase === 'implementation' ? 'pending' : 'completed',
        off ? 'integration off' : conflicts + ' conflict' + (conflicts === 1 ? '' : 's')],
      ['S99', s99 ? s99.status : off ? 'skipped' : 'pending', s99 ? 'attempt ' + s99.attempt : ''],
      ['gate', gate ? (gate.passed ? 'passed' : 'failed') : rep.gate ? 'pending' : 'off',
        gate ? rep.gate.project.length + ' run' + (rep.gate.project.length === 1 ? '' : 's') + ', after ' + gate.after : 'no project gate'],
      ['V', v ? (ver.pass === true ? 'passed' : ver.pass === false && v.status === 'completed' ? 'failed' : v.status) : off ? 'skipped' : 'pending',
        ver.rounds ? ver.rounds + ' round' + (ver.rounds === 1 ? '' : 's') : ''],
      ['F', f ? f.status : ver.pass === true || off ? 'skipped' : 'pending', f ? f.id : ''],
    ];
  }

  function renderIntegration(p, rep) {
    const strip = el('div', { class: 'phase', id: 'phase' });
    phaseSteps(rep).forEach(([name, st, detail], i) => {
      if (i) strip.append(el('span', { class: 'arrow', text: '→' }));
      strip.append(el('div', { class: 'step s-' + st }, el('div', { class: 'name', text: name }), stateSpan(st), el('div', { class: 'muted', text: detail })));
    });
    const out = [el('p', null, 'Phase: ', stateSpan(rep.phase), '  result: ', stateSpan(rep.result)), strip];
    const ver = rep.verification || {};
    if ((ver.issues || []).length) out.push(el('h2', { text: 'Verification issues' }), el('ul', null, ver.issues.map(s => el('li', { text: s }))));
    out.push(el('h2', { text: 'Conflicts' }));
    out.push((rep.conflicts || []).length
      ? table(['Path', 'Tasks'], rep.conflicts.map(c => el('tr', null, td(c.path, 'id'),
        td((c.tasks || []).map((id, i) => [i ? ', ' : '', el('a', { href: taskHref(p, id), text: id })])))))
      : el('p', { class: 'muted', text: 'none' }));
    out.push(...gateSection(rep.gate), ...gitSection(rep), ...usageSection(rep));
    return el('div', null, out);
  }

  function gateSection(g) {
    if (!g) return [];
    const out = [el('h2', { text: 'Gate' })];
    const tg = g.tasks || [];
    const failed = tg.filter(x => !x.passed);
    out.push(el('p', null, tg.length + ' task gate runs, ' + failed.length + ' failed',
      failed.length ? [': ', failed.map((x, i) => [i ? ', ' : '', x.id + '#' + x.attempt])] : ''));
    if ((g.project || []).length) {
      out.push(table(['After', '#Attempt', 'Result', '#Seconds', 'Output'], g.project.map(x => el('tr', null,
        td(x.after, 'id'), td(String(x.attempt || ''), 'num'), td(stateSpan(x.passed ? 'passed' : 'failed')),
        td((x.seconds || 0).toFixed(1), 'num'),
        td(x.output_tail || x.error ? el('details', null, el('summary', { text: 'output' }), el('pre', { text: (x.error ? x.error + '\n' : '') + (x.output_tail || '') })) : '')))));
    }
    if ((g.claims || []).length) {
      out.push(table(['Tool', 'Model', '#Exited 0', '#Passed gate'], g.claims.map(c => el('tr', null,
        td(c.tool), td(c.model), td(String(c.exited_zero), 'num'), td(String(c.passed_gate), 'num')))));
    }
    return out;
  }

  function usageSection(rep) {
    const t = rep.totals || {};
    const out = [el('h2', { text: 'Totals' }), el('div', { class: 'cards' },
      card('Tasks', (t.completed || 0) + ' done, ' + (t.failed || 0) + ' failed of ' + (t.tasks || 0)),
      card('Attempts', String(t.attempts || 0) + (t.preemptions ? ' (' + t.preemptions + ' preempted)' : '')),
      card('Tokens in / out', fmtNum(t.tokens_in) + ' / ' + fmtNum(t.tokens_out)),
      card('Cost', fmtUSD(t.cost_usd)),
      card('Wall time', fmtDur(t.wall_seconds || 0)))];
    if ((rep.nodes || []).length) {
      out.push(el('h2', { text: 'Node use' }), table(['Node', 'State', '#Attempts', '#Busy'], rep.nodes.map(n => el('tr', null,
        td(n.name, 'id'), td(stateSpan(n.state)), td(String(n.attempts || 0), 'num'), td(fmtDur(n.busy_seconds || 0), 'num')))));
    }
    return out;
  }

  function gitSection(rep) {
    const out = [];
    if (rep.git) {
      out.push(el('h2', { text: 'Git' }), el('div', { class: 'cards' },
        Object.entries(rep.git).filter(([, v]) => typeof v !== 'object').map(([k, v]) => card(k, String(v)))));
    }
    if ((rep.dangerous || []).length) out.push(el('h2', { text: 'Ran without confinement' }), el('ul', null, rep.dangerous.map(s => el('li', { text: s }))));
    if (rep.final) out.push(el('p', { class: 'muted' }, 'Final tree: ', el('code', { text: rep.final })));
    return out;
  }

  // ---- runs tab

  function runsTab(p, body, summary) {
    const err = el('div'), box = el('div');
    body.append(err, box);
    const r = refresher(async () => {
      const d = await api('projects/' + enc(p) + '/runs');
      const cur = summary() ? summary().run : 0;
      const runs = (d.runs || []).slice().reverse();
      const row = (x) => el('tr', null,
        td(String(x.run) + (x.run === cur ? ' (current)' : ''), 'num'), td(stateSpan(x.result || 'running')), td(x.trigger || ''),
        td(fmtTime(x.started_at)),
        td(x.finished_at ? fmtDur((parseTime(x.finished_at) - parseTime(x.started_at)) / 1000) : timer(x.started_at, 'for')),
        td(String(x.tasks_ran || 0), 'num'), td(String(x.tasks_reused || 0), 'num'), td(fmtUSD(x.cost_usd), 'num'));
      box.replaceChildren(runs.length
        ? table(['#Run', 'Result', 'Trigger', 'Started', 'Took', '#Ran', '#Reused', '#Cost'], runs.map(row))
        : el('p', { class: 'muted', text: 'no runs kept' }));
    }, err, 500);
    r.run();
    r.relevant = (ev) => !ev.task;
    return r;
  }

  // ---- one task: facts, attempts, diffstat, events and its live log

  function taskView(p, id) {
    const err = el('div'), facts = el('div'), logHead = el('div', { class: 'toolbar' }), logBox = el('pre', { class: 'log', id: 'log' });
    const acts = el('div', { class: 'actions', id: 'task-actions' });
    view.append(el('h1', null, el('a', { href: '#/', text: 'Projects' }), ' / ', el('a', { href: projectHref(p), text: p }), ' / ', id),
      err, acts, facts, el('h2', { text: 'Log' }), logHead, logBox);
    const log = logFollower(p, id, logBox, logHead);
    let task = null;
    const r = refresher(async () => {
      task = await api('projects/' + enc(p) + '/tasks/' + enc(id));
      facts.replaceChildren(renderTask(p, task));
      window.dispatchActions.task(acts, p, task, () => r.kick());
      log.update(task);
    }, err);
    r.run();
    const iv = setInterval(r.kick, POLL);
    return {
      onEvent(ev) { if (ev.project === p && ev.task === id) r.kick(); },
      stop() { r.stop(); log.close(); clearInterval(iv); },
    };
  }

  // stallAt is when a running task is stopped as stalled: stall_seconds
  // after its tool last wrote, as the wrapper's stall watch counts (output
  // resets it; a heartbeat does not), or after its heartbeat when the
  // node does not say when it wrote.
  function stallAt(t) {
    return new Date(parseTime(t.output_at || t.heartbeat_at) + t.stall_seconds * 1000).toISOString();
  }

  function renderTask(p, t) {
    const links = (ids) => (ids || []).length ? ids.map((x, i) => [i ? ', ' : '', el('a', { href: taskHref(p, x), text: x })]) : '—';
    const running = t.status === 'running';
    const cards = el('div', { class: 'cards' },
      card('State', [stateSpan(t.waiting ? 'waiting' : t.status, t.gating ? ' (gate)' : ''),
        t.waiting ? el('div', { class: 'text', text: t.waiting }) : null]), card('Title', el('span', { class: 'text', id: 'task-title', text: t.title || '' })),
      card('Type', t.type || ''), card('Node', t.node || '—'), card('Attempt', String(t.attempt || 0) + (t.preemptions ? ' (' + t.preemptions + ' preempted)' : '')),
      card(t.waiting ? 'Waiting for' : running ? 'Running for' : 'Took', running ? timer(t.started_at, 'for') : t.duration_seconds ? fmtDur(t.duration_seconds) : '—'),
      card('Heartbeat', t.heartbeat_at ? timer(t.heartbeat_at, 'since') : '—'),
      card('Stall timeout', running && t.stall_seconds && (t.output_at || t.heartbeat_at)
        ? timer(stallAt(t), 'until', '', 'stalled')
        : t.stall_seconds ? fmtDur(t.stall_seconds) : '—'),
      card('Sandbox', t.sandbox || '—'),
      t.slurm_job ? card('Slurm job', t.slurm_job) : null,
      t.tool ? card('Tool', t.tool + (t.model ? ' (' + t.model + ')' : '')) : null,
      t.priority ? card('Priority', String(t.priority)) : null,
      t.reused_from_run ? card('Reused from run', String(t.reused_from_run)) : null);
    const out = [cards,
      el('p', null, 'Depends on: ', links(t.depends_on), '   Needed by: ', links(t.dependents))];
    if (t.error) out.push(el('pre', { class: 'error', text: (t.error_class ? t.error_class + ': ' : '') + t.error }));
    out.push(el('h2', { text: 'Attempts' }), attemptsTable(p, t.attempts || []));
    if ((t.outputs || []).length) {
      out.push(el('h2', { text: 'Outputs' }), table(['Path', '#Size', 'SHA-256'], t.outputs.map(o => el('tr', null,
        td(o.path, 'id'), td(fmtBytes(o.size), 'num'), td(String(o.sha256 || '').slice(0, 12), 'id')))));
    }
    if (t.diffstat) out.push(el('h2', { text: 'Diffstat' }), el('pre', { id: 'diffstat', text: t.diffstat }));
    if ((t.events || []).length) {
      out.push(el('h2', { text: 'Events' }), table(['Time', 'Event', '#Attempt', 'Node', 'Message'], t.events.slice().reverse().map(ev => el('tr', null,
        td(fmtTime(ev.time)), td([ev.kind, ev.from || ev.to ? ' ' + (ev.from || '') + ' → ' + (ev.to || '') : '']),
        td(ev.attempt ? String(ev.attempt) : '', 'num'), td(ev.node || ''), td(ev.message || '', 'title')))));
    }
    return el('div', null, out);
  }

  // attemptsTable lists the task's attempts of every kept run, newest
  // first as the API gives them, each with its run (a link to the runs).
  function attemptsTable(p, as) {
    if (!as.length) return el('p', { class: 'muted', text: 'not run yet' });
    const t = table(['#Attempt', '#Run', 'Node', 'State', 'API mode', '#Exit', 'Error', '#Tokens in', '#Tokens out', '#Cost', 'Started', 'Took', 'Sandbox'],
      as.map(a => el('tr', { data: { attempt: a.attempt, run: a.run || '' } },
        td(String(a.attempt), 'num'), td(a.run ? el('a', { href: projectHref(p, 'runs'), text: String(a.run) }) : '', 'num'),
        td(a.node || ''), td(stateSpan(a.status)), td(a.api_mode || ''),
        td(a.signal ? a.signal : String(a.exit_code), 'num'), td((a.error_class ? a.error_class + ': ' : '') + (a.error || ''), 'title'),
        td(fmtNum(a.tokens_in), 'num'), td(fmtNum(a.tokens_out), 'num'), td(fmtUSD(a.cost_usd), 'num'),
        td(fmtTime(a.started_at)),
        td(a.completed_at ? fmtDur((parseTime(a.completed_at) - parseTime(a.started_at)) / 1000) : timer(a.started_at, 'for')),
        td(a.sandbox || ''))));
    t.id = 'attempts';
    return t;
  }

  // logFollower shows one attempt's log: the tail as text, and while the
  // attempt runs the growth of it over SSE (each message {"text": …}).
  function logFollower(p, id, pre, head) {
    let es = null, shown = null, pinned = null, retry = null;
    const state = el('span', { class: 'muted', id: 'log-state' });
    const pick = el('select', { 'aria-label': 'attempt', onchange: () => { pinned = pick.value ? Number(pick.value) : null; shown = null; if (last) update(last); } });
    head.append(pick, state);
    let last = null;
    function close() { if (es) { es.close(); es = null; } clearTimeout(retry); }
    function add(text) {
      const atEnd = pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 8;
      pre.append(document.createTextNode(text));
      let len = pre.textContent.length;
      while (len > LOG_MAX && pre.firstChild) { len -= pre.firstChild.textContent.length; pre.firstChild.remove(); }
      if (atEnd) pre.scrollTop = pre.scrollHeight;
    }
    const base = () => '/api/v1/projects/' + enc(p) + '/tasks/' + enc(id) + '/log?tail=500';
    function follow(att) {
      close();
      pre.replaceChildren();
      state.textContent = 'following attempt ' + att + ' live…';
      es = new EventSource(base() + '&attempt=' + att + '&follow=1');
      es.onmessage = (m) => { try { add(JSON.parse(m.data).text || ''); } catch (e) { /* not ours */ } };
      // The whole log went by: keep it rather than fetch its tail again.
      es.addEventListener('end', () => { close(); shown = att + ':done'; state.textContent = 'attempt ' + att + ' ended'; });
      es.addEventListener('problem', (m) => {
        try { add('\n[dispatch: the log cannot be followed: ' + JSON.parse(m.data).error + ']\n'); } catch (e) { /* not ours */ }
      });
      // Reconnecting would repeat the tail: start afresh instead.
      es.onerror = () => { close(); state.textContent = 'log stream lost; reconnecting…'; retry = setTimeout(() => { shown = null; if (last) update(last); }, 2000); };
    }
    async function tail(att) {
      close();
      state.textContent = 'attempt ' + att + ' (ended)';
      const r = await fetch(base() + '&attempt=' + att, { credentials: 'same-origin' });
      pre.replaceChildren();
      add(r.ok ? await r.text() : 'no log: ' + r.status);
    }
    function update(t) {
      last = t;
      const atts = t.attempts || [];
      // One option per attempt after "newest attempt"; replaceChildren
      // takes nodes, not an array of them.
      if (pick.options.length !== atts.length + 1) {
        pick.replaceChildren(el('option', { value: '', text: 'newest attempt' }),
          ...atts.map(a => el('option', { value: String(a.attempt), text: 'attempt ' + a.attempt + (a.run ? ' (run ' + a.run + ')' : '') })));
        pick.value = pinned ? String(pinned) : '';
      }
      const att = pinned || t.attempt;
      if (!att) { state.textContent = 'not started yet'; return; }
      const a = (t.attempts || []).find(x => x.attempt === att);
      const runs = att === t.attempt ? t.status === 'running' : !!a && !a.completed_at && a.status === 'running';
      // A batch job that waits in its queue has written no log yet: it is
      // followed once it starts (the next poll).
      const waits = att === t.attempt && !!t.waiting;
      const key = att + (waits ? ':waiting' : runs ? ':live' : ':done');
      if (key === shown || (es && shown === att + ':live')) return;
      shown = key;
      if (waits) { close(); pre.replaceChildren(); state.textContent = 'attempt ' + att + ' waits in its queue: no log yet'; return; }
      if (runs) follow(att); else tail(att).catch(e => { state.textContent = String(e.message || e); });
    }
    return { update, close };
  }

  // ---- nodes and schedules

  function nodesView() {
    return simpleView('Nodes', 'nodes', (d) => {
      const ns = d.nodes || [];
      if (!ns.length) return el('p', { class: 'muted', text: 'no nodes in nodes.yaml' });
      return table(['Node', 'State', 'Slots used', '#Load', '#Memory free', '#Disk free', 'Platform', 'Wrapper', '#RTT', 'Last seen', 'Sandbox', 'Last error'],
        ns.map(n => el('tr', { data: { node: n.name } },
          td(n.name, 'id'), td(stateSpan(n.state)),
          td([el('meter', { min: 0, max: Math.max(1, n.slots || 0), value: n.running || 0 }), ' ' + (n.running || 0) + ' / ' + (n.slots || 0)]),
          td(n.load1 !== undefined ? Number(n.load1).toFixed(2) : '', 'num'),
          td(n.mem_available_bytes ? fmtBytes(n.mem_available_bytes) : '', 'num'),
          td(n.disk_free_bytes ? fmtBytes(n.disk_free_bytes) : '', 'num'),
          td(n.os ? n.os + '/' + n.arch : ''), td(n.wrapper_version || ''),
          td(n.rtt_ms ? Number(n.rtt_ms).toFixed(1) + ' ms' : '', 'num'),
          td(timer(n.last_seen, 'since')), td(n.sandbox || '—'),
          td(n.last_error || '', n.last_error ? 'title error' : 'title'))));
    }, (ev) => ev.kind === 'node' || !!ev.node, 5000);
  }

  function schedulesView() {
    let v = null;
    v = simpleView('Schedules', 'schedules', (d) => {
      const ss = d.schedules || [];
      const note = el('p', { class: d.serving ? 'muted' : 'warn', text: d.serving ? 'dispatch serve runs the schedules.' : 'no dispatch serve runs: nothing starts on schedule.' });
      if (!ss.length) return el('div', null, note, el('p', { class: 'muted', text: 'no project has a schedule' }));
      return el('div', null, note, table(['Project', 'Schedule', 'Enabled', 'Next run', 'Last run', 'Last result', '#Failures', '#Skipped', 'Reuse', 'Problem', 'Action'],
        ss.map(s => el('tr', { data: { project: s.project } },
          td(el('a', { href: projectHref(s.project), text: s.project })),
          td([s.kind ? s.kind + ' ' : '', el('code', { text: s.schedule || '' }), s.timezone ? ' (' + s.timezone + ')' : '']),
          td(stateSpan(s.enabled ? 'on' : 'off')),
          td(s.next_at ? [fmtTime(s.next_at), ' (', timer(s.next_at, 'until', '', 'due'), ')'] : '—'),
          td(s.last_run ? el('a', { href: projectHref(s.project, 'runs'), text: 'run ' + s.last_run }) : '—'),
          td(s.last_result ? stateSpan(s.last_result) : ''),
          td(String(s.failures || 0), 'num'), td(String(s.skipped || 0), 'num'),
          td(s.reuse ? 'yes' : 'no'), td(s.problem || '', s.problem ? 'title error' : 'title'),
          td(window.dispatchActions.schedule(s, () => v.onEvent({})))))));
    }, (ev) => !ev.task);
    return v;
  }

  // ---- start

  // The token came in the address; the server has set its cookie, so drop
  // it from the address bar and the history.
  if (new URLSearchParams(location.search).has('token')) {
    history.replaceState(null, '', location.pathname + location.hash);
  }
  window.addEventListener('hashchange', route);
  route();
  connect();
  watcher.run();
  setInterval(watcher.kick, 5000);
})();
