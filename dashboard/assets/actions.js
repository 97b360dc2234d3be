// dispatch dashboard: the actions (retry, cancel, stop, start, a
// schedule's switch). app.js calls window.dispatchActions to put their
// buttons on the task, run and schedule pages. Same rules as app.js: text
// only through text nodes, no inline script or style.
//
// Each action is a POST with the session's CSRF token (GET
// /api/v1/session gives it) in the X-Dispatch-CSRF header; the server also
// checks the Origin. A destructive one asks first, in the page.
'use strict';

(function () {
  function el(tag, props, ...kids) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(props || {})) {
      if (v === null || v === undefined) continue;
      if (k === 'class') e.className = v;
      else if (k === 'text') e.textContent = String(v);
      else if (k.startsWith('on')) e.addEventListener(k.slice(2), v);
      else e.setAttribute(k, String(v));
    }
    for (const k of kids.flat(Infinity)) if (k !== null && k !== undefined && k !== false) e.append(k);
    return e;
  }
  const enc = encodeURIComponent;

  // session is asked once per page: whether this token may act, and the
  // CSRF token its actions carry.
  let sessionP = null;
  function session() {
    if (!sessionP) {
      sessionP = fetch('/api/v1/session', { credentials: 'same-origin', headers: { Accept: 'application/json' } })
        .then(r => r.ok ? r.json() : { actions: false, refused: 'the session cannot be read: ' + r.status })
        .catch(e => { sessionP = null; return { actions: false, refused: String(e.message || e) }; });
    }
    return sessionP;
  }

  async function post(path, body) {
    const s = await session();
    const r = await fetch('/api/v1/' + path, {
      method: 'POST', credentials: 'same-origin',
      headers: { 'Content-Type': 'application/json', Accept: 'application/json', 'X-Dispatch-CSRF': s.csrf || '' },
      body: JSON.stringify(body || {}),
    });
    const d = await r.json().catch(() => ({}));
    if (!r.ok) throw new Error(d.error || (r.status + ' ' + r.statusText));
    return d.message || '';
  }

  // confirm asks in the page (a dialog element, not window.confirm) and
  // resolves to true when the operator confirms.
  function confirm(question, yes) {
    return new Promise((resolve) => {
      const old = document.getElementById('confirm');
      if (old) old.remove();
      const dlg = el('dialog', { id: 'confirm', class: 'confirm' });
      const done = (v) => { dlg.close(); dlg.remove(); resolve(v); };
      dlg.append(el('p', { text: question }), el('div', { class: 'actions' },
        el('button', { type: 'button', id: 'confirm-yes', class: 'danger', text: yes, onclick: () => done(true) }),
        el('button', { type: 'button', id: 'confirm-no', text: 'Keep it', onclick: () => done(false) })));
      dlg.addEventListener('cancel', () => resolve(false));
      document.body.append(dlg);
      dlg.showModal();
    });
  }

  // button is one action: label, the request, a question when it is
  // destructive; the answer goes in out, then done() refreshes the page.
  function button(out, done, a) {
    const b = el('button', { type: 'button', class: a.ask ? 'danger' : null, 'data-action': a.id, text: a.label });
    b.addEventListener('click', async () => {
      if (a.ask && !(await confirm(a.ask, a.label))) return;
      b.disabled = true;
      out.replaceChildren(el('span', { class: 'muted', text: a.label + '…' }));
      try {
        out.replaceChildren(el('span', { class: 'ok', text: await post(a.path, a.body) }));
        if (done) done(); // the page shows the change
      } catch (e) {
        out.replaceChildren(el('span', { class: 'error', text: String(e.message || e) }));
      } finally {
        b.disabled = false;
      }
    });
    return b;
  }

  // bar fills box with the buttons of acts, or says why there are none.
  async function bar(box, acts, done) {
    const s = await session();
    const out = box.querySelector('.action-result') || el('span', { class: 'action-result', role: 'status' });
    if (!s.actions) {
      box.replaceChildren(el('span', { class: 'muted', text: 'Actions: ' + (s.refused || 'not allowed') }));
      return;
    }
    box.replaceChildren(...acts.filter(Boolean).map(a => button(out, done, a)), out);
  }

  const RETRYABLE = ['completed', 'failed', 'blocked', 'canceled'];
  const CANCELABLE = ['pending', 'claimed', 'running', 'blocked'];

  window.dispatchActions = {
    // task puts a task's buttons in box: retry when it has ended, cancel
    // while it waits or runs.
    task(box, p, t, done) {
      const base = 'projects/' + enc(p) + '/';
      return bar(box, [
        RETRYABLE.includes(t.status) && { id: 'retry', label: 'Retry', path: base + 'retry', body: { ids: [t.id] } },
        RETRYABLE.includes(t.status) && {
          id: 'retry-downstream', label: 'Retry with all after it', path: base + 'retry', body: { ids: [t.id], downstream: true },
          ask: 'Rerun ' + p + '/' + t.id + ' and every task after it? Their results are made again.',
        },
        CANCELABLE.includes(t.status) && {
          id: 'cancel', label: 'Cancel task', path: base + 'cancel', body: { ids: [t.id] },
          ask: 'Cancel ' + p + '/' + t.id + '?' + (t.status === 'running' || t.status === 'claimed' ? ' Its running attempt is killed on its node.' : ''),
        },
      ], done);
    },
    // project puts a run's buttons in box, from its summary.
    project(box, p, s, done) {
      const base = 'projects/' + enc(p) + '/';
      const c = s.counts || {}, running = (c.running || 0) + (c.claimed || 0);
      return bar(box, [
        c.failed && { id: 'retry-failed', label: 'Retry failed (' + c.failed + ')', path: base + 'retry', body: { failed: true } },
        s.state === 'active' && { id: 'stop', label: 'Stop', path: base + 'stop', ask: 'Stop ' + p + '? Nothing new starts; running tasks go on.' },
        s.state === 'active' && running && {
          id: 'stop-kill', label: 'Stop and kill', path: base + 'stop', body: { kill: true },
          ask: 'Stop ' + p + ' and kill its ' + running + ' running task(s)? They are canceled.',
        },
        s.state === 'stopped' && { id: 'start', label: 'Resume', path: base + 'start' },
        s.state === 'done' && { id: 'start', label: 'Start a new run', path: base + 'start' },
      ], done);
    },
    // schedule is a schedule's switch, in a box of its own.
    schedule(sch, done) {
      const box = el('span', { class: 'actions' });
      const base = 'schedules/' + enc(sch.project) + '/';
      bar(box, [sch.enabled
        ? { id: 'disable', label: 'Disable', path: base + 'disable', ask: 'Disable the schedule of ' + sch.project + '? Nothing starts on schedule until it is enabled.' }
        : { id: 'enable', label: 'Enable', path: base + 'enable' }], done);
      return box;
    },
  };
})();
