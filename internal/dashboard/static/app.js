// qunfa operator dashboard. Plain JavaScript, no build step, no third-party
// code. Every number comes from HTTP API v1 (DESIGN.md) with the token the
// operator enters at login; the job page shows the API's "counts" and
// "failures" fields unchanged, as `qunfa watch` does.
'use strict';

(() => {
  // Settings. Tests may change them at run time through window.qunfa.
  const cfg = (window.qunfa = Object.assign(
    { pollMs: 1000, itemPageSize: 50, exportPageSize: 1000, etaWindowSec: 60, seriesMinutes: 30, seriesPollMs: 5000,
      csvMaxBytes: 4 << 20, csvMaxRecipients: 50000, campaignJobPages: 4, nextFirings: 5 },
    window.qunfa || {}
  ));

  // The API lives next to /ui/ (behind API Gateway a stage prefix comes first).
  const base = location.pathname.replace(/\/ui(\/.*)?$/, '');
  const tokenKey = 'qunfa.token';
  const langKey = 'qunfa.lang';

  const itemStatuses = ['pending', 'submitted', 'confirmed', 'failed', 'abandoned'];
  const categories = ['retryable', 'rate_limited', 'permanent', 'uncertain', 'exhausted', 'cancelled', 'suppressed', 'frequency_capped'];
  const countKeys = ['pending', 'submitted', 'confirmed', 'failed', 'abandoned'];
  const finalJob = new Set(['completed', 'partial', 'failed', 'cancelled']);

  // ---------------------------------------------------------------- i18n

  let dict = { en: {}, zh: {} };
  let lang = 'en';

  function pickLanguage() {
    const saved = localStorage.getItem(langKey);
    if (saved === 'en' || saved === 'zh') return saved;
    const prefs = navigator.languages && navigator.languages.length ? navigator.languages : [navigator.language || 'en'];
    for (const p of prefs) {
      const l = String(p).toLowerCase();
      if (l.startsWith('zh')) return 'zh';
      if (l.startsWith('en')) return 'en';
    }
    return 'en';
  }

  // t translates a key, filling {name} placeholders from vars.
  function t(key, vars) {
    let s = (dict[lang] && dict[lang][key]) ?? dict.en[key] ?? key;
    if (vars) s = s.replace(/\{(\w+)\}/g, (m, k) => (k in vars ? String(vars[k]) : m));
    return s;
  }

  // tOr translates key when the dictionary has it, else shows the raw value
  // (a status or category newer than this page).
  function tOr(prefix, value) {
    const key = prefix + value;
    return dict.en[key] !== undefined ? t(key) : value;
  }

  const locale = () => (lang === 'zh' ? 'zh-CN' : 'en');
  const num = (n) => new Intl.NumberFormat(locale()).format(n ?? 0);
  const pct = (x) => new Intl.NumberFormat(locale(), { style: 'percent', maximumFractionDigits: 1 }).format(x);

  function fmtTime(iso) {
    if (!iso) return t('none');
    const d = new Date(iso);
    return d.toLocaleString(locale(), { dateStyle: 'short', timeStyle: 'medium' });
  }

  function fmtDuration(sec) {
    sec = Math.max(0, Math.round(sec));
    const h = Math.floor(sec / 3600), m = Math.floor((sec % 3600) / 60), s = sec % 60;
    if (h > 0) return t('dur.hm', { h, m });
    if (m > 0) return t('dur.ms', { m, s });
    return t('dur.s', { s });
  }

  function ago(iso) {
    if (!iso) return t('never');
    const sec = (Date.now() - new Date(iso).getTime()) / 1000;
    return sec < 1 ? t('justNow') : t('ago', { d: fmtDuration(sec) });
  }

  function applyStaticI18n() {
    document.documentElement.lang = lang === 'zh' ? 'zh-CN' : 'en';
    document.title = t('title');
    for (const el of document.querySelectorAll('[data-i18n]')) el.textContent = t(el.dataset.i18n);
    for (const el of document.querySelectorAll('[data-i18n-aria]')) el.setAttribute('aria-label', t(el.dataset.i18nAria));
    document.getElementById('lang').value = lang;
  }

  // ----------------------------------------------------------------- DOM

  // h builds an element: h('a', {href: '#'}, 'text', child...). Text is
  // always set as text, never parsed as HTML.
  function h(tag, attrs, ...children) {
    const el = tag.startsWith('svg:')
      ? document.createElementNS('http://www.w3.org/2000/svg', tag.slice(4))
      : document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === undefined || v === null || v === false) continue;
      if (k.startsWith('on')) el.addEventListener(k.slice(2), v);
      else if (k === 'text') el.textContent = v;
      else el.setAttribute(k, v === true ? '' : String(v));
    }
    for (const c of children.flat(Infinity)) {
      if (c === null || c === undefined || c === false) continue;
      el.append(c instanceof Node ? c : document.createTextNode(String(c)));
    }
    return el;
  }

  const $ = (sel, root) => (root || document).querySelector(sel);

  function setText(el, s) {
    if (el && el.textContent !== s) el.textContent = s;
  }

  function announce(msg) {
    const live = document.getElementById('live');
    live.textContent = '';
    // A fresh text node after a tick makes screen readers speak it again.
    setTimeout(() => { live.textContent = msg; }, 50);
  }

  function progressBar(id, label) {
    const fill = h('span', { class: 'fill' });
    return h('div', {
      id, class: 'bar', role: 'progressbar', 'aria-label': label,
      'aria-valuemin': 0, 'aria-valuemax': 100, 'aria-valuenow': 0,
    }, fill);
  }

  function setProgress(bar, done, total) {
    const f = total > 0 ? done / total : 0;
    const p = Math.round(f * 1000) / 10;
    bar.setAttribute('aria-valuenow', String(p));
    bar.setAttribute('aria-valuetext', t('progress.text', { done: num(done), total: num(total), pct: pct(f) }));
    bar.firstChild.style.width = p + '%';
  }

  function statusBadge(status, reason) {
    const el = h('span', { class: 'badge' });
    updateBadge(el, status, reason);
    return el;
  }

  function updateBadge(el, status, reason) {
    el.className = 'badge st-' + status;
    el.dataset.status = status;
    el.dataset.reason = reason || '';
    let s = tOr('status.', status);
    if (reason) s += ' · ' + tOr('reason.', reason);
    setText(el, s);
  }

  // syncRows keeps a tbody's rows in the order of items, reusing each
  // item's row, so focus and selection survive the next poll.
  function syncRows(tbody, items, key, create, update) {
    const rows = new Map();
    for (const tr of tbody.children) if (tr.dataset.key !== undefined) rows.set(tr.dataset.key, tr);
    const keep = new Set();
    items.forEach((it, i) => {
      const k = String(key(it));
      let tr = rows.get(k);
      if (!tr) {
        tr = create(it);
        tr.dataset.key = k;
      }
      update(tr, it);
      keep.add(k);
      if (tbody.children[i] !== tr) tbody.insertBefore(tr, tbody.children[i] || null);
    });
    for (const [k, tr] of rows) if (!keep.has(k)) tr.remove();
    for (const tr of [...tbody.children]) if (tr.dataset.key === undefined) tr.remove();
  }

  // ----------------------------------------------------------------- API

  class APIError extends Error {
    constructor(status, problem) {
      super((problem && (problem.detail || problem.title)) || 'HTTP ' + status);
      this.status = status;
      this.problem = problem || {};
    }
    // routeMissing: this server has no such endpoint (yet).
    get routeMissing() {
      return (this.status === 404 && /^no such route/.test(this.problem.detail || '')) ||
        this.status === 405 || this.status === 501;
    }
  }

  function token() { return sessionStorage.getItem(tokenKey) || ''; }

  async function api(method, path, body, opts) {
    const headers = { Authorization: 'Bearer ' + token(), Accept: 'application/json' };
    const init = { method, headers, cache: 'no-store', credentials: 'omit' };
    if (body !== undefined) {
      headers['Content-Type'] = 'application/json';
      init.body = JSON.stringify(body);
    }
    let res;
    try {
      res = await fetch(base + path, init);
    } catch (e) {
      throw new APIError(0, { detail: t('err.network') });
    }
    const text = await res.text();
    let data = null;
    try { data = text ? JSON.parse(text) : null; } catch (e) { data = null; }
    if (!res.ok) {
      const err = new APIError(res.status, data || { detail: text.slice(0, 200) });
      if (res.status === 401 && token() && !(opts && opts.probe)) logout(t('login.expired'));
      throw err;
    }
    return data;
  }

  function errorText(err) {
    if (!(err instanceof APIError)) return String(err && err.message ? err.message : err);
    let s = err.message;
    for (const f of err.problem.errors || []) s += '; ' + f.field + ': ' + f.message;
    return s;
  }

  const enc = encodeURIComponent;
  const qs = (params) => {
    const p = new URLSearchParams();
    for (const [k, v] of Object.entries(params)) if (v !== '' && v !== undefined && v !== null) p.set(k, v);
    const s = p.toString();
    return s ? '?' + s : '';
  };

  // ------------------------------------------------------------- polling

  let pollGen = 0;
  let pollTimer = null;

  // poll runs fn now and then every cfg.pollMs after the previous run
  // ends, until the page changes.
  function poll(fn) {
    const gen = ++pollGen;
    clearTimeout(pollTimer);
    const loop = async () => {
      if (gen !== pollGen) return;
      try {
        await fn();
        if (gen !== pollGen) return;
        showBanner('');
        setText(document.getElementById('updated'), t('updated', { time: new Date().toLocaleTimeString(locale()) }));
      } catch (e) {
        if (gen !== pollGen) return;
        if (!(e instanceof APIError && e.status === 401)) showBanner(t('err.poll', { msg: errorText(e) }));
      }
      if (gen === pollGen) pollTimer = setTimeout(loop, cfg.pollMs);
    };
    loop();
  }

  function stopPolling() {
    pollGen++;
    clearTimeout(pollTimer);
  }

  function showBanner(msg) {
    const b = document.getElementById('banner');
    if (!msg) { if (!b.hidden) { b.hidden = true; b.textContent = ''; } return; }
    setText(b, msg);
    b.hidden = false;
  }

  // ----------------------------------------------------- progress history

  // Recent (time, done) samples per job, for the ETA and the rate.
  const history = new Map();

  function noteProgress(job) {
    const done = doneOf(job.counts);
    const now = Date.now() / 1000;
    let s = history.get(job.id);
    if (!s) history.set(job.id, (s = []));
    const last = s[s.length - 1];
    if (!last || last.done !== done || now - last.t >= 1) s.push({ t: now, done });
    while (s.length > 2 && now - s[0].t > cfg.etaWindowSec) s.shift();
  }

  // rateOf is items per second over the recent window, or null.
  function rateOf(job) {
    const s = history.get(job.id);
    if (!s || s.length < 2) return null;
    const a = s[0], b = s[s.length - 1];
    if (b.t - a.t < 2) return null;
    return (b.done - a.done) / (b.t - a.t);
  }

  function etaText(job) {
    if (finalJob.has(job.status)) return t('eta.finished');
    if (job.status === 'paused') return t('eta.paused');
    const r = rateOf(job);
    if (r === null) return t('eta.measuring');
    const left = job.total - doneOf(job.counts);
    if (left <= 0) return t('eta.finishing');
    if (r <= 0) return t('eta.stalled');
    return t('eta.in', { d: fmtDuration(left / r) });
  }

  // doneOf is what `qunfa watch` counts as done.
  const doneOf = (c) => (c ? (c.confirmed || 0) + (c.failed || 0) + (c.abandoned || 0) : 0);

  // -------------------------------------------------------------- dialog

  // confirmDialog asks before an action. Resolves true on confirm, false on
  // cancel or Esc. Focus stays inside while it is open and returns to
  // where it was.
  function confirmDialog({ title, body, yes, danger }) {
    const dlg = document.getElementById('confirm');
    const yesBtn = document.getElementById('confirm-yes');
    const noBtn = document.getElementById('confirm-no');
    const opener = document.activeElement;
    setText(document.getElementById('confirm-title'), title);
    const bodyEl = document.getElementById('confirm-body');
    bodyEl.replaceChildren(...body.map((p) => h('p', {}, p)));
    yesBtn.textContent = yes;
    yesBtn.className = danger ? 'danger' : 'primary';
    noBtn.textContent = t('dialog.back');
    return new Promise((resolve) => {
      const focusable = () => [...dlg.querySelectorAll('button, [href], input, select, textarea, [tabindex]:not([tabindex="-1"])')]
        .filter((el) => !el.disabled);
      const onKey = (e) => {
        if (e.key === 'Escape') { e.preventDefault(); finish(false); return; }
        if (e.key !== 'Tab') return;
        const f = focusable();
        if (!f.length) return;
        const first = f[0], last = f[f.length - 1];
        if (e.shiftKey && document.activeElement === first) { e.preventDefault(); last.focus(); }
        else if (!e.shiftKey && document.activeElement === last) { e.preventDefault(); first.focus(); }
      };
      const onCancel = (e) => { e.preventDefault(); finish(false); };
      const onYes = () => finish(true);
      const onNo = () => finish(false);
      function finish(ok) {
        dlg.removeEventListener('keydown', onKey);
        dlg.removeEventListener('cancel', onCancel);
        yesBtn.removeEventListener('click', onYes);
        noBtn.removeEventListener('click', onNo);
        if (dlg.open) dlg.close();
        if (opener && opener.isConnected && typeof opener.focus === 'function') opener.focus();
        resolve(ok);
      }
      dlg.addEventListener('keydown', onKey);
      dlg.addEventListener('cancel', onCancel);
      yesBtn.addEventListener('click', onYes);
      noBtn.addEventListener('click', onNo);
      dlg.showModal();
      noBtn.focus(); // the safe choice first
    });
  }

  // ------------------------------------------------------------- routing

  const main = () => document.getElementById('main');
  let current = null; // the page shown: {name, render(), ...}

  function route() {
    stopPolling();
    showBanner('');
    const hash = location.hash || '';
    const loggedIn = !!token();
    document.getElementById('nav').hidden = !loggedIn;
    document.getElementById('logout').hidden = !loggedIn;
    if (!loggedIn) return show(loginPage());
    let m;
    if ((m = hash.match(/^#\/jobs\/([^/?]+)$/))) return show(jobPage(decodeURIComponent(m[1])));
    if (hash === '#/accounts') return show(accountsPage());
    if (hash === '#/campaigns') return show(campaignsPage());
    if ((m = hash.match(/^#\/campaigns\/([^/?]+)$/))) return show(campaignPage(decodeURIComponent(m[1])));
    if (hash === '#/suppressions') return show(suppressionsPage());
    if (hash === '#/webhooks') return show(webhooksPage());
    if (hash === '#/tokens') return show(tokensPage());
    if ((m = hash.match(/^#\/webhooks\/([^/?]+)$/))) return show(webhookPage(decodeURIComponent(m[1])));
    if (hash === '#/new-job') return show(newJobPage());
    if (hash !== '#/jobs') { location.replace('#/jobs'); return; }
    return show(jobsPage());
  }

  function show(page, keepFocus) {
    current = page;
    for (const a of document.querySelectorAll('#nav a')) {
      if (a.getAttribute('href') === page.nav) a.setAttribute('aria-current', 'page');
      else a.removeAttribute('aria-current');
    }
    page.render();
    if (!keepFocus) {
      const h1 = $('h1', main());
      if (h1) { h1.setAttribute('tabindex', '-1'); h1.focus({ preventScroll: true }); }
    }
    if (page.poll) poll(page.poll);
  }

  function logout(reason) {
    sessionStorage.removeItem(tokenKey);
    loginReason = reason || '';
    if (location.hash !== '#/jobs') location.hash = '#/jobs';
    else route();
  }

  // --------------------------------------------------------------- login

  let loginReason = '';

  function loginPage() {
    return {
      nav: '',
      render() {
        const err = h('p', { id: 'login-error', class: 'error', role: 'alert' }, loginReason);
        const input = h('input', {
          id: 'token', type: 'password', autocomplete: 'current-password', required: true,
          'aria-describedby': 'token-help login-error', spellcheck: 'false',
        });
        const btn = h('button', { type: 'submit', id: 'login-submit', class: 'primary' }, t('login.submit'));
        const form = h('form', { id: 'login-form', class: 'card narrow', novalidate: true },
          h('label', { for: 'token' }, t('login.token')),
          input,
          h('p', { id: 'token-help', class: 'muted' }, t('login.help')),
          btn, err);
        form.addEventListener('submit', async (e) => {
          e.preventDefault();
          const tok = input.value.trim();
          if (!tok) { err.textContent = t('login.empty'); input.focus(); return; }
          btn.disabled = true;
          err.textContent = '';
          sessionStorage.setItem(tokenKey, tok);
          try {
            await api('GET', '/v1/jobs?limit=1', undefined, { probe: true });
            loginReason = '';
            announce(t('login.ok'));
            if (location.hash.startsWith('#/') && location.hash !== '#/') route();
            else location.hash = '#/jobs';
          } catch (ex) {
            sessionStorage.removeItem(tokenKey);
            btn.disabled = false;
            err.textContent = ex instanceof APIError && ex.status === 401 ? t('login.bad') : t('err.generic', { msg: errorText(ex) });
            input.focus();
          }
        });
        main().replaceChildren(h('h1', {}, t('login.title')), form);
        input.focus();
      },
    };
  }

  // ---------------------------------------------------------------- jobs

  let jobsCursor = [''];

  function jobsPage() {
    let tbody, newer, older, empty, next = '';
    return {
      nav: '#/jobs',
      render() {
        tbody = h('tbody', { id: 'jobs-body' });
        empty = h('p', { id: 'jobs-empty', class: 'muted', hidden: true }, t('jobs.empty'));
        newer = h('button', { type: 'button', id: 'jobs-newer', onclick: () => { jobsCursor.pop(); reload(); } }, t('jobs.newer'));
        older = h('button', { type: 'button', id: 'jobs-older', onclick: () => { jobsCursor.push(next); reload(); } }, t('jobs.older'));
        const reload = () => { tbody.replaceChildren(); poll(this.poll); };
        main().replaceChildren(
          h('h1', {}, t('jobs.title')),
          h('div', { class: 'scroll' }, h('table', { id: 'jobs-table' },
            h('caption', { class: 'sr-only' }, t('jobs.caption')),
            h('thead', {}, h('tr', {},
              ['jobs.name', 'jobs.status', 'jobs.progress', 'jobs.started', 'jobs.eta'].map((k) => h('th', { scope: 'col' }, t(k))))),
            tbody)),
          empty,
          h('div', { class: 'pager' }, newer, older));
      },
      async poll() {
        const cursor = jobsCursor[jobsCursor.length - 1];
        const page = await api('GET', '/v1/jobs' + qs({ cursor }));
        next = page.next_cursor || '';
        newer.disabled = jobsCursor.length <= 1;
        older.disabled = !next;
        empty.hidden = page.jobs.length > 0;
        for (const j of page.jobs) noteProgress(j);
        syncRows(tbody, page.jobs, (j) => j.id, (j) => {
          return h('tr', { 'data-job-id': j.id },
            h('td', {}, h('a', { href: '#/jobs/' + enc(j.id), class: 'job-link' }), h('div', { class: 'muted small mono' }, j.id)),
            h('td', {}, statusBadge(j.status, j.pause_reason)),
            h('td', {}, progressBar('', t('jobs.progressOf', { name: j.name || j.id })), h('div', { class: 'small progress-text' })),
            h('td', { class: 'started' }),
            h('td', { class: 'eta' }));
        }, (tr, j) => {
          const c = tr.children;
          setText($('a', c[0]), j.name || j.id);
          updateBadge($('.badge', c[1]), j.status, j.pause_reason);
          const done = doneOf(j.counts);
          setProgress($('.bar', c[2]), done, j.total);
          setText($('.progress-text', c[2]), t('progress.text', { done: num(done), total: num(j.total), pct: pct(j.total ? done / j.total : 0) }));
          setText(c[3], j.started_at ? fmtTime(j.started_at) : t('notStarted'));
          setText(c[4], etaText(j));
        });
      },
    };
  }

  // ----------------------------------------------------------------- job

  // Item filters per job, kept across language switches.
  const itemFilters = new Map();

  function jobPage(id) {
    const el = {};
    let job = null;
    let lastStatus = null;
    const filters = itemFilters.get(id) || { status: 'failed', category: '', cursors: [''], next: '' };
    itemFilters.set(id, filters);

    const action = async (verb) => {
      if (!job) return;
      const done = doneOf(job.counts);
      const left = job.total - done;
      const body = {
        pause: [t('act.pause.body1'), t('act.pause.body2')],
        resume: [t('act.resume.body1'), t('act.resume.body2')],
        cancel: [t('act.cancel.body1', { left: num(left) }), t('act.cancel.body2', { sent: num(job.counts.confirmed + job.counts.submitted) }), t('act.cancel.body3')],
        approve: job.canary ? [t('act.approve.body1', { count: num(job.canary.count), confirmed: num(job.canary.confirmed), failed: num(job.canary.failed) }),
          t('act.approve.body2', { left: num(left) })] : [],
      }[verb];
      const ok = await confirmDialog({
        title: t('act.' + verb + '.title', { name: job.name || job.id }),
        body, yes: t('act.' + verb + '.yes'), danger: verb === 'cancel',
      });
      if (!ok) return;
      setText(el.actionMsg, t('act.working'));
      try {
        // Approving a canary is resuming its pause (DESIGN.md).
        const after = await api('POST', '/v1/jobs/' + enc(id) + '/' + (verb === 'approve' ? 'resume' : verb));
        updateJob(after);
        setText(el.actionMsg, t('act.' + verb + '.done'));
        announce(t('act.' + verb + '.done'));
      } catch (e) {
        setText(el.actionMsg, t('err.action', { msg: errorText(e) }));
        announce(t('err.action', { msg: errorText(e) }));
      }
    };

    let seriesAt = 0, lastFinal = null;

    // loadSeries draws failures per minute from the server's series, so
    // the chart is the same after a reload.
    async function loadSeries() {
      const res = await api('GET', '/v1/jobs/' + enc(id) + '/series' + qs({ minutes: cfg.seriesMinutes }));
      const minutes = minuteGrid(res.from, res.to);
      const byMinute = new Map(res.points.map((p) => [Date.parse(p.at), p]));
      const cats = [...new Set(res.points.flatMap((p) => Object.keys(p.failures || {})))].sort();
      lineChart(el.chart, {
        lines: cats.map((k) => ({ key: k, label: tOr('cat.', k), values: minutes.map((m) => ((byMinute.get(m) || {}).failures || {})[k] || 0) })),
        minutes, empty: t('chart.empty'),
        label: (vals) => t('chart.label', { window: fmtDuration(minutes.length * 60), values: vals }),
      });
    }

    function updateJob(j) {
      job = j;
      noteProgress(j);

      setText(el.name, j.name || j.id);
      updateBadge(el.status, j.status, j.pause_reason);
      if (lastStatus !== null && lastStatus !== j.status) announce(t('job.statusNow', { status: el.status.textContent }));
      lastStatus = j.status;
      const canaryWait = j.status === 'paused' && j.pause_reason === 'canary';
      el.pause.disabled = j.status !== 'running';
      el.resume.disabled = j.status !== 'paused';
      el.resume.hidden = canaryWait;
      el.approve.hidden = !canaryWait;
      el.approve.disabled = !canaryWait;
      el.cancel.disabled = !(j.status === 'running' || j.status === 'paused');
      updateCanary(j, canaryWait);

      const done = doneOf(j.counts);
      setProgress(el.bar, done, j.total);
      setText(el.progressText, t('progress.text', { done: num(done), total: num(j.total), pct: pct(j.total ? done / j.total : 0) }));
      setText(el.eta, etaText(j));
      const r = rateOf(j);
      setText(el.rate, r === null ? t('none') : t('rate.value', { r: new Intl.NumberFormat(locale(), { maximumFractionDigits: 1 }).format(Math.max(0, r)) }));
      setText(el.started, j.started_at ? fmtTime(j.started_at) : t('notStarted'));
      setText(el.finished, j.finished_at ? fmtTime(j.finished_at) : t('none'));
      const limits = [];
      if (j.budget > 0) limits.push(t('job.budget', { budget: num(j.budget), used: num(j.budget_used) }));
      if (j.rate_per_sec > 0) limits.push(t('job.rateCap', { r: j.rate_per_sec }));
      if (j.suppressed > 0) limits.push(t('job.suppressed', { n: num(j.suppressed) }));
      setText(el.limits, limits.length ? limits.join(' · ') : t('none'));

      for (const k of countKeys) setText(el.counts[k], num(j.counts[k]));

      // Failures by category: exactly the API's "failures" map.
      const cats = Object.entries(j.failures || {}).filter(([, n]) => n).sort((a, b) => b[1] - a[1] || (a[0] < b[0] ? -1 : 1));
      syncRows(el.failBody, cats, ([k]) => k,
        ([k]) => h('tr', { 'data-category': k }, h('th', { scope: 'row' }), h('td', { class: 'num' })),
        (tr, [k, n]) => { setText(tr.children[0], tOr('cat.', k)); setText(tr.children[1], num(n)); });
      el.failEmpty.hidden = cats.length > 0;
      setText(el.words, summaryWords(j));

      syncRows(el.shardBody, j.shards || [], (s) => s.index, (s) => h('tr', { 'data-shard': s.index },
        h('td', { class: 'num' }), h('td', {}), h('td', {}, statusBadge(s.status, s.pause_reason)),
        h('td', {}, progressBar('', t('shards.progressOf', { n: s.index })), h('div', { class: 'small progress-text' })),
        h('td', { class: 'num' }), h('td', {}), h('td', { class: 'num' })),
      (tr, s) => {
        const c = tr.children;
        const sd = doneOf(s.counts);
        setText(c[0], String(s.index));
        setText(c[1], s.account);
        updateBadge($('.badge', c[2]), s.status, s.pause_reason);
        setProgress($('.bar', c[3]), sd, s.size);
        setText($('.progress-text', c[3]), t('progress.short', { done: num(sd), total: num(s.size) }));
        setText(c[4], num(s.cursor));
        setText(c[5], ago(s.last_advanced_at));
        c[5].title = s.last_advanced_at ? fmtTime(s.last_advanced_at) : '';
        setText(c[6], s.slow_factor ? '×' + new Intl.NumberFormat(locale(), { maximumFractionDigits: 2 }).format(s.slow_factor) : '×1');
      });

      const f = j.failures || {};
      setText(el.deadCounts, t('dead.counts', { exhausted: num(f.exhausted || 0), permanent: num(f.permanent || 0) }));
      el.redriveExhausted.disabled = !(f.exhausted > 0);
      el.redrivePermanent.disabled = !(f.permanent > 0);
    }

    async function loadItems() {
      const cursor = filters.cursors[filters.cursors.length - 1];
      const page = await api('GET', '/v1/jobs/' + enc(id) + '/items' +
        qs({ status: filters.status, category: filters.category, cursor, limit: cfg.itemPageSize }));
      filters.next = page.next_cursor || '';
      el.itemsNewer.disabled = filters.cursors.length <= 1;
      el.itemsOlder.disabled = !filters.next;
      setText(el.itemsPage, t('items.page', { n: filters.cursors.length }));
      // A large job's filtered page may come back empty before the end
      // (each call reads a bounded part of the job): say so.
      el.itemsEmpty.hidden = page.items.length > 0;
      setText(el.itemsEmpty, t(filters.next ? 'items.noneYet' : 'items.none'));
      syncRows(el.itemBody, page.items, (it) => it.seq, () => h('tr', {},
        h('td', { class: 'num seq' }), h('td', {}), h('td', {}), h('td', { class: 'status' }),
        h('td', { class: 'category' }), h('td', {}), h('td', { class: 'num' }), h('td', {})),
      (tr, it) => {
        const c = tr.children;
        tr.dataset.status = it.status;
        tr.dataset.category = it.error ? it.error.category : '';
        setText(c[0], String(it.seq));
        setText(c[1], it.account);
        setText(c[2], it.to);
        setText(c[3], tOr('istatus.', it.status));
        setText(c[4], it.error ? tOr('cat.', it.error.category) : '');
        setText(c[5], it.error && it.error.code ? it.error.code : '');
        setText(c[6], String(it.attempts));
        setText(c[7], it.error && it.error.message ? it.error.message : '');
      });
    }

    // The operators' actions on this job, from the audit log (admin
    // tokens only: the section stays hidden for others).
    let auditAt = 0;
    async function loadAudit() {
      if (Date.now() - auditAt < 5000) return;
      auditAt = Date.now();
      let page;
      try {
        page = await api('GET', '/v1/audit' + qs({ job: id, limit: 20 }));
      } catch (e) {
        if (e instanceof APIError && (e.status === 403 || e.status === 404)) { el.auditSection.hidden = true; return; }
        throw e;
      }
      el.auditSection.hidden = false;
      el.auditEmpty.hidden = page.entries.length > 0;
      el.auditTable.hidden = page.entries.length === 0;
      el.auditBody.replaceChildren(...page.entries.map((e) => h('tr', {},
        h('td', {}, fmtTime(e.at)),
        h('td', {}, e.token_name + ' (' + tOr('role.', e.role) + ')'),
        h('td', {}, e.method + ' ' + e.path),
        h('td', { class: 'num' }, String(e.status)))));
    }

    async function loadReview() {
      // Only items the reconciler put under review: an item whose answer was
      // just lost has not been looked up yet, and resending it could
      // deliver it twice.
      const page = await api('GET', '/v1/jobs/' + enc(id) + '/items' + qs({ status: 'submitted', category: 'uncertain', review: 'true', limit: 50 }));
      page.items = page.items.filter((it) => it.under_review);
      el.reviewEmpty.hidden = page.items.length > 0;
      el.reviewTable.hidden = page.items.length === 0;
      syncRows(el.reviewBody, page.items, (it) => it.seq, (it) => {
        const who = it.to;
        return h('tr', {},
          h('td', { class: 'num' }, String(it.seq)), h('td', {}, it.account), h('td', {}, it.to),
          h('td', { class: 'num att' }), h('td', { class: 'msg' }),
          h('td', { class: 'row-actions' },
            h('button', { type: 'button', class: 'resolve-delivered', 'aria-label': t('review.deliveredFor', { seq: it.seq, to: who }), onclick: () => resolve(it, 'delivered') }, t('review.delivered')),
            h('button', { type: 'button', class: 'resolve-resend', 'aria-label': t('review.resendFor', { seq: it.seq, to: who }), onclick: () => resolve(it, 'resend') }, t('review.resend'))));
      }, (tr, it) => {
        setText($('.att', tr), String(it.attempts));
        setText($('.msg', tr), it.error && it.error.message ? it.error.message : '');
      });
    }

    async function resolve(it, outcome) {
      const ok = await confirmDialog({
        title: t('review.' + outcome + '.title', { seq: it.seq }),
        body: [t('review.' + outcome + '.body', { to: it.to })], yes: t('review.' + outcome + '.yes'), danger: outcome === 'resend',
      });
      if (!ok) return;
      try {
        await api('POST', '/v1/jobs/' + enc(id) + '/items/' + enc(it.seq) + '/resolve', { outcome });
        setText(el.reviewMsg, t('review.done', { seq: it.seq }));
        announce(t('review.done', { seq: it.seq }));
        loadReview().catch(() => {});
      } catch (e) {
        const msg = e instanceof APIError && e.routeMissing ? t('review.unavailable') : t('err.action', { msg: errorText(e) });
        setText(el.reviewMsg, msg);
        announce(msg);
      }
    }

    async function redrive(category) {
      const n = (job && job.failures && job.failures[category]) || 0;
      const ok = await confirmDialog({
        title: t('dead.title.' + category, { n: num(n) }),
        body: [t('dead.body'), t('dead.body.' + category)], yes: t('dead.yes'),
      });
      if (!ok) return;
      try {
        const res = await api('POST', '/v1/jobs/' + enc(id) + '/redrive', { category });
        const msg = t('dead.done', { n: num(res && res.redriven != null ? res.redriven : 0) });
        setText(el.deadMsg, msg);
        announce(msg);
      } catch (e) {
        const msg = e instanceof APIError && e.routeMissing ? t('dead.unavailable') : t('err.action', { msg: errorText(e) });
        setText(el.deadMsg, msg);
        announce(msg);
      }
    }

    async function exportCSV() {
      el.exportBtn.disabled = true;
      const rows = [['seq', 'shard', 'account', 'to', 'ref', 'status', 'attempts', 'category', 'code', 'message',
        'submitted_at', 'finished_at', 'msgid']];
      let cursor = '';
      try {
        do {
          const page = await api('GET', '/v1/jobs/' + enc(id) + '/items' +
            qs({ status: filters.status, category: filters.category, cursor, limit: cfg.exportPageSize }));
          for (const it of page.items) {
            const e = it.error || {};
            rows.push([it.seq, it.shard, it.account, it.to, it.ref || '', it.status, it.attempts, e.category || '', e.code || '',
              e.message || '', it.submitted_at || '', it.finished_at || '', it.msgid || '']);
          }
          cursor = page.next_cursor || '';
          setText(el.exportMsg, t('export.progress', { n: num(rows.length - 1) }));
        } while (cursor);
      } catch (e) {
        setText(el.exportMsg, t('err.action', { msg: errorText(e) }));
        el.exportBtn.disabled = false;
        return;
      }
      const csv = '\ufeff' + rows.map((r) => r.map(csvCell).join(',')).join('\r\n') + '\r\n';
      const blob = new Blob([csv], { type: 'text/csv;charset=utf-8' });
      const url = URL.createObjectURL(blob);
      const name = ['qunfa', id, 'items', filters.status || 'all', filters.category || 'all'].join('-').replace(/[^\w.-]+/g, '_') + '.csv';
      const a = h('a', { href: url, download: name, hidden: true });
      document.body.append(a);
      a.click();
      a.remove();
      setTimeout(() => URL.revokeObjectURL(url), 60000);
      const msg = t('export.done', { n: num(rows.length - 1), file: name });
      setText(el.exportMsg, msg);
      announce(msg);
      el.exportBtn.disabled = false;
    }

    // updateCanary shows the job's canary: its size and results, and what
    // it waits for.
    function updateCanary(j, waiting) {
      const c = j.canary;
      el.canarySection.hidden = !c;
      if (!c) return;
      setText(el.canaryCount, num(c.count));
      setText(el.canaryConfirmed, num(c.confirmed));
      setText(el.canaryFailed, num(c.failed));
      let state;
      if (c.approved) state = t('canary.approved');
      else if (waiting) state = t('canary.waiting');
      else if (finalJob.has(j.status)) state = t('canary.notApproved');
      else state = t('canary.sending', { done: num(c.confirmed + c.failed), count: num(c.count) });
      setText(el.canaryState, state);
      el.canaryState.className = waiting ? 'msg warn' : 'msg';
    }

    function section(idName, titleKey, ...children) {
      return h('section', { id: idName, 'aria-labelledby': idName + '-h' }, h('h2', { id: idName + '-h' }, t(titleKey)), ...children);
    }

    return {
      nav: '#/jobs',
      render() {
        el.name = h('h1', { id: 'job-name' }, id);
        el.status = h('span', { id: 'job-status', class: 'badge' });
        el.pause = h('button', { type: 'button', id: 'btn-pause', disabled: true, onclick: () => action('pause') }, t('act.pause'));
        el.resume = h('button', { type: 'button', id: 'btn-resume', disabled: true, onclick: () => action('resume') }, t('act.resume'));
        el.approve = h('button', { type: 'button', id: 'btn-approve-canary', class: 'primary', hidden: true, disabled: true, onclick: () => action('approve') }, t('act.approve'));
        el.cancel = h('button', { type: 'button', id: 'btn-cancel', class: 'danger', disabled: true, onclick: () => action('cancel') }, t('act.cancel'));
        el.canaryCount = h('dd', { id: 'canary-count', class: 'num' });
        el.canaryConfirmed = h('dd', { id: 'canary-confirmed', class: 'num' });
        el.canaryFailed = h('dd', { id: 'canary-failed', class: 'num' });
        el.canaryState = h('p', { id: 'canary-state', class: 'msg' });
        el.actionMsg = h('p', { id: 'action-msg', role: 'status', class: 'msg' });
        el.bar = progressBar('job-progress', t('job.progress'));
        el.progressText = h('span', { id: 'job-progress-text' });
        el.eta = h('dd', { id: 'job-eta' });
        el.rate = h('dd', { id: 'job-rate' });
        el.started = h('dd', { id: 'job-started' });
        el.finished = h('dd', { id: 'job-finished' });
        el.limits = h('dd', { id: 'job-limits' });
        el.counts = {};
        for (const k of countKeys) el.counts[k] = h('dd', { id: 'count-' + k, class: 'num' }, '0');

        el.failBody = h('tbody', { id: 'failures-body' });
        el.failEmpty = h('p', { class: 'muted', id: 'failures-empty' }, t('fail.none'));
        el.chart = h('div', { id: 'fail-chart', class: 'chart' });
        el.words = h('p', { id: 'job-words', class: 'words' });

        el.shardBody = h('tbody', { id: 'shards-body' });

        el.reviewBody = h('tbody', { id: 'review-body' });
        el.reviewTable = h('table', { id: 'review-table', hidden: true },
          h('caption', { class: 'sr-only' }, t('review.title')),
          h('thead', {}, h('tr', {}, ['items.seq', 'items.account', 'items.to', 'items.attempts', 'items.message', 'review.actions'].map((k) => h('th', { scope: 'col' }, t(k))))),
          el.reviewBody);
        el.reviewEmpty = h('p', { class: 'muted', id: 'review-empty' }, t('review.none'));
        el.reviewMsg = h('p', { id: 'review-msg', role: 'status', class: 'msg' });

        el.auditBody = h('tbody', { id: 'audit-body' });
        el.auditTable = h('table', { id: 'audit-table', hidden: true },
          h('caption', { class: 'sr-only' }, t('audit.title')),
          h('thead', {}, h('tr', {}, ['audit.at', 'audit.who', 'audit.what', 'audit.status'].map((k) => h('th', { scope: 'col' }, t(k))))),
          el.auditBody);
        el.auditEmpty = h('p', { class: 'muted', id: 'audit-empty' }, t('audit.none'));

        el.deadCounts = h('p', { id: 'dead-counts' });
        el.redriveExhausted = h('button', { type: 'button', id: 'btn-redrive-exhausted', disabled: true, onclick: () => redrive('exhausted') }, t('dead.redrive.exhausted'));
        el.redrivePermanent = h('button', { type: 'button', id: 'btn-redrive-permanent', disabled: true, onclick: () => redrive('permanent') }, t('dead.redrive.permanent'));
        el.deadMsg = h('p', { id: 'dead-msg', role: 'status', class: 'msg' });

        const statusSel = h('select', { id: 'filter-status' },
          h('option', { value: '' }, t('filter.all')), itemStatuses.map((s) => h('option', { value: s }, tOr('istatus.', s))));
        const catSel = h('select', { id: 'filter-category' },
          h('option', { value: '' }, t('filter.all')), categories.map((c) => h('option', { value: c }, tOr('cat.', c))));
        statusSel.value = filters.status;
        catSel.value = filters.category;
        const onFilter = () => {
          filters.status = statusSel.value;
          filters.category = catSel.value;
          filters.cursors = [''];
          el.itemBody.replaceChildren();
          loadItems().then(() => announce(t('items.filtered'))).catch((e) => showBanner(t('err.poll', { msg: errorText(e) })));
        };
        statusSel.addEventListener('change', onFilter);
        catSel.addEventListener('change', onFilter);
        el.itemBody = h('tbody', { id: 'items-body' });
        el.itemsEmpty = h('p', { class: 'muted', id: 'items-empty', hidden: true }, t('items.none'));
        el.itemsPage = h('span', { id: 'items-page', class: 'muted' });
        el.itemsNewer = h('button', { type: 'button', id: 'items-prev', disabled: true, onclick: () => { filters.cursors.pop(); el.itemBody.replaceChildren(); loadItems().catch(() => {}); } }, t('items.prev'));
        el.itemsOlder = h('button', { type: 'button', id: 'items-next', disabled: true, onclick: () => { filters.cursors.push(filters.next); el.itemBody.replaceChildren(); loadItems().catch(() => {}); } }, t('items.next'));
        el.exportBtn = h('button', { type: 'button', id: 'btn-export', onclick: exportCSV }, t('export.button'));
        el.exportMsg = h('span', { id: 'export-msg', role: 'status', class: 'msg' });

        const dl = (pairs) => h('dl', { class: 'facts' }, pairs.map(([k, dd]) => [h('dt', {}, t(k)), dd]));

        main().replaceChildren(
          h('p', {}, h('a', { href: '#/jobs', id: 'back' }, t('job.back'))),
          el.name,
          h('p', { class: 'muted small mono' }, t('job.id', { id })),
          h('section', { id: 'summary', 'aria-label': t('job.summary'), class: 'card' },
            h('div', { class: 'row' }, h('span', {}, t('job.status') + ' '), el.status,
              h('div', { class: 'actions', role: 'group', 'aria-label': t('act.group') }, el.pause, el.resume, el.approve, el.cancel)),
            el.actionMsg,
            h('div', { class: 'overall' }, el.bar, el.progressText),
            dl([['job.eta', el.eta], ['job.rate', el.rate], ['job.started', el.started], ['job.finished', el.finished], ['job.limits', el.limits]])),
          el.canarySection = section('canary', 'canary.title',
            h('p', { class: 'muted small' }, t('canary.help')),
            el.canaryState,
            dl([['canary.count', el.canaryCount], ['canary.confirmed', el.canaryConfirmed], ['canary.failed', el.canaryFailed]])),
          section('counts', 'counts.title',
            el.words,
            h('dl', { class: 'counts' }, countKeys.map((k) => h('div', { class: 'count c-' + k }, h('dt', {}, tOr('istatus.', k)), el.counts[k]))),
            h('p', { class: 'muted small' }, t('counts.help'))),
          section('failures', 'fail.title',
            h('div', { class: 'split' },
              h('div', {}, h('table', { id: 'failures-table' },
                h('caption', { class: 'sr-only' }, t('fail.title')),
                h('thead', {}, h('tr', {}, h('th', { scope: 'col' }, t('fail.category')), h('th', { scope: 'col' }, t('fail.count')))),
                el.failBody), el.failEmpty),
              el.chart),
            h('p', { class: 'muted small' }, t('fail.chartHelp'))),
          section('shards', 'shards.title',
            h('div', { class: 'scroll' }, h('table', { id: 'shards-table' },
              h('caption', { class: 'sr-only' }, t('shards.title')),
              h('thead', {}, h('tr', {}, ['shards.index', 'shards.account', 'shards.status', 'shards.progress', 'shards.cursor', 'shards.lastAdvanced', 'shards.slow']
                .map((k) => h('th', { scope: 'col' }, t(k))))),
              el.shardBody))),
          section('review', 'review.title', h('p', { class: 'muted small' }, t('review.help')), el.reviewEmpty,
            h('div', { class: 'scroll' }, el.reviewTable), el.reviewMsg),
          section('dead', 'dead.title', h('p', { class: 'muted small' }, t('dead.help')), el.deadCounts,
            h('div', { class: 'actions' }, el.redriveExhausted, el.redrivePermanent), el.deadMsg),
          el.auditSection = section('audit', 'audit.title', h('p', { class: 'muted small' }, t('audit.help')), el.auditEmpty,
            h('div', { class: 'scroll' }, el.auditTable)),
          section('items', 'items.title',
            h('div', { class: 'filters', role: 'group', 'aria-label': t('filter.group') },
              h('label', { for: 'filter-status' }, t('filter.status')), statusSel,
              h('label', { for: 'filter-category' }, t('filter.category')), catSel,
              el.exportBtn, el.exportMsg),
            h('div', { class: 'scroll' }, h('table', { id: 'items-table' },
              h('caption', { class: 'sr-only' }, t('items.title')),
              h('thead', {}, h('tr', {}, ['items.seq', 'items.account', 'items.to', 'items.status', 'items.category', 'items.code', 'items.attempts', 'items.message']
                .map((k) => h('th', { scope: 'col' }, t(k))))),
              el.itemBody)),
            el.itemsEmpty,
            h('div', { class: 'pager' }, el.itemsNewer, el.itemsPage, el.itemsOlder)));
        if (job) updateJob(job);
      },
      async poll() {
        let j;
        try {
          j = await api('GET', '/v1/jobs/' + enc(id));
        } catch (e) {
          if (e instanceof APIError && e.status === 404) {
            stopPolling();
            main().replaceChildren(h('h1', {}, t('job.notFound')), h('p', {}, h('a', { href: '#/jobs' }, t('job.back'))));
            return;
          }
          throw e;
        }
        updateJob(j);
        const now = Date.now();
        const loads = [loadItems(), loadReview(), loadAudit()];
        if (now - seriesAt >= cfg.seriesPollMs || finalJob.has(j.status) !== lastFinal) {
          seriesAt = now;
          lastFinal = finalJob.has(j.status);
          loads.push(loadSeries());
        }
        await Promise.all(loads);
      },
    };
  }

  // csvCell quotes a CSV field, and defuses cells a spreadsheet would run
  // as a formula.
  function csvCell(v) {
    let s = v === null || v === undefined ? '' : String(v);
    if (/^[=+@\t\r]/.test(s) || (/^-/.test(s) && !/^-\d+(\.\d+)?$/.test(s))) s = "'" + s;
    return /[",\r\n]/.test(s) ? '"' + s.replace(/"/g, '""') + '"' : s;
  }

  const palette = ['#0b5cad', '#b3261e', '#1b7f3b', '#8a4b00', '#6b3fa0', '#00687a', '#5f5f5f'];
  const dashes = ['', '6 3', '2 3', '8 3 2 3', '4 4', '1 2', '10 4'];

  // minuteGrid lists the minute starts (ms) in [from, to).
  function minuteGrid(from, to) {
    const out = [];
    for (let m = Date.parse(from); m < Date.parse(to); m += 60000) out.push(m);
    return out;
  }

  // summaryWords says where a job stands in the requirement documents'
  // words: delivered, failed, delivered after retries, needing a person
  // (items under review and dead letters).
  function summaryWords(j) {
    const c = j.counts || {}, f = j.failures || {};
    return t('summary.words', {
      delivered: num(c.confirmed), failed: num(c.failed), retried: num(j.confirmed_after_retry || 0),
      person: num((f.uncertain || 0) + (f.exhausted || 0)),
    });
  }

  // lineChart draws values per minute as an inline SVG line chart, one
  // line (colour and dash pattern) per series, and an optional dashed
  // limit line.
  function lineChart(box, { lines, minutes, limit, limitLabel, empty, label }) {
    const W = 520, H = 180, L = 48, R = 10, T = 10, B = 28;
    const shown = lines.filter((l) => l.values.some((v) => v));
    const t0 = minutes.length ? minutes[0] : Date.now();
    const t1 = minutes.length > 1 ? minutes[minutes.length - 1] : t0 + 60000;
    let ymax = Math.max(1, limit || 0);
    for (const l of shown) for (const v of l.values) ymax = Math.max(ymax, v);
    // Round the axis up to 1, 2, 5 or 10 times a power of ten.
    const mag = Math.pow(10, Math.floor(Math.log10(ymax)));
    ymax = [1, 2, 5, 10].map((m) => m * mag).find((v) => v >= ymax) || ymax;
    const x = (tm) => L + ((tm - t0) / Math.max(1, t1 - t0)) * (W - L - R);
    const y = (v) => T + (1 - v / ymax) * (H - T - B);
    const latest = (l) => l.values.length ? l.values[l.values.length - 1] : 0;
    const values = shown.map((l) => l.label + ' ' + num(latest(l))).join(', ');
    const summary = shown.length ? label(values) : empty;
    const svg = h('svg:svg', { viewBox: `0 0 ${W} ${H}`, role: 'img', 'aria-label': summary, class: 'chart-svg', preserveAspectRatio: 'xMidYMid meet' },
      h('svg:title', {}, summary));
    for (const v of [0, ymax / 2, ymax]) {
      svg.append(h('svg:line', { x1: L, x2: W - R, y1: y(v), y2: y(v), class: 'grid' }));
      svg.append(h('svg:text', { x: L - 6, y: y(v) + 4, 'text-anchor': 'end', class: 'axis' }, num(Math.round(v * 10) / 10)));
    }
    const hm = (tm) => new Date(tm).toLocaleTimeString(locale(), { hour: '2-digit', minute: '2-digit' });
    svg.append(h('svg:text', { x: L, y: H - 8, class: 'axis' }, hm(t0)));
    svg.append(h('svg:text', { x: W - R, y: H - 8, 'text-anchor': 'end', class: 'axis' }, hm(t1)));
    if (limit > 0) {
      svg.append(h('svg:line', { x1: L, x2: W - R, y1: y(limit), y2: y(limit), class: 'limit', 'data-limit': limit }));
    }
    shown.forEach((l, i) => {
      const pts = l.values.map((v, k) => `${x(minutes[k]).toFixed(1)},${y(v).toFixed(1)}`).join(' ');
      svg.append(h('svg:polyline', {
        points: pts, fill: 'none', stroke: palette[i % palette.length], 'stroke-width': 2.5,
        'stroke-dasharray': dashes[i % dashes.length] || null, 'data-category': l.key,
      }));
    });
    const legend = h('ul', { class: 'legend', 'aria-hidden': 'true' }, shown.map((l, i) => h('li', {},
      h('svg:svg', { width: 28, height: 10, viewBox: '0 0 28 10' },
        h('svg:line', { x1: 0, x2: 28, y1: 5, y2: 5, stroke: palette[i % palette.length], 'stroke-width': 3, 'stroke-dasharray': dashes[i % dashes.length] || null })),
      ' ' + l.label + ' ' + num(latest(l)))),
    limit > 0 ? h('li', { class: 'limit-key' }, '— — ' + limitLabel) : null);
    box.replaceChildren(svg, legend);
  }

  // ------------------------------------------------------------ accounts

  const accountFields = [
    { key: 'rate_per_sec', step: 'any', min: 0 },
    { key: 'burst', step: 'any', min: 1 },
    { key: 'online_reserve_per_sec', step: 'any', min: 0 },
    { key: 'max_recipients_per_call', step: 1, min: 1 },
  ];
  const breakerFields = [
    { key: 'consecutive_failures', step: 1, min: 0 },
    { key: 'failure_rate', step: 'any', min: 0, max: 1 },
    { key: 'min_samples', step: 1, min: 0 },
    { key: 'cooldown_sec', step: 1, min: 0 },
  ];
  // The account's settings the form does not edit: saving sends them back
  // as last read, so a save from the form keeps them (the API replaces the
  // whole account).
  const keptAccountFields = ['max_content_bytes', 'warmup_sec', 'frequency_cap', 'provider', 'status_lookup', 'http', 'pacing'];

  function accountsPage() {
    let list, empty;
    const forms = new Map();

    function accountForm(acct) {
      const isNew = !acct;
      const pfx = isNew ? 'new' : 'acct-' + String(acct.account).replace(/[^\w-]/g, '_');
      const input = (f, group) => {
        const fid = `${pfx}-${group ? 'breaker-' : ''}${f.key}`;
        const err = h('span', { class: 'field-error', id: fid + '-err' });
        const inp = h('input', { id: fid, name: (group ? 'breaker.' : '') + f.key, type: 'number', step: f.step, min: f.min, max: f.max, inputmode: 'decimal', 'aria-describedby': fid + '-help ' + fid + '-err' });
        return h('div', { class: 'field' },
          h('label', { for: fid }, t('acct.' + f.key)), inp,
          h('span', { class: 'muted small', id: fid + '-help' }, t('acct.' + f.key + '.help')), err);
      };
      const idField = isNew ? h('div', { class: 'field' },
        h('label', { for: 'new-account' }, t('acct.id')),
        h('input', { id: 'new-account', name: 'account', type: 'text', required: true, 'aria-describedby': 'new-account-err' }),
        h('span', { class: 'field-error', id: 'new-account-err' })) : null;
      const msg = h('p', { class: 'msg', role: 'status' });
      const dirtyNote = h('span', { class: 'muted small dirty-note', hidden: true }, t('acct.unsaved'));
      const form = h('form', { class: 'account-form', novalidate: true, 'data-account': acct ? acct.account : '' },
        idField,
        h('fieldset', {}, h('legend', {}, t('acct.limits')), accountFields.map((f) => input(f, false))),
        h('fieldset', {}, h('legend', {}, t('acct.breaker')), breakerFields.map((f) => input(f, true))),
        h('div', { class: 'actions' }, h('button', { type: 'submit', class: 'primary' }, isNew ? t('acct.create') : t('acct.save')), dirtyNote),
        msg);
      form.addEventListener('input', () => { form.dataset.dirty = '1'; dirtyNote.hidden = false; });
      form.addEventListener('submit', async (e) => {
        e.preventDefault();
        for (const el of form.querySelectorAll('.field-error')) el.textContent = '';
        for (const el of form.querySelectorAll('[aria-invalid]')) el.removeAttribute('aria-invalid');
        const id = isNew ? form.elements.account.value.trim() : acct.account;
        if (!id) { $('#new-account-err').textContent = t('acct.idRequired'); form.elements.account.setAttribute('aria-invalid', 'true'); form.elements.account.focus(); return; }
        const body = { breaker: {} };
        const numVal = (name) => { const v = form.elements[name].value; return v === '' ? undefined : Number(v); };
        for (const f of accountFields) body[f.key] = numVal(f.key);
        for (const f of breakerFields) { const v = numVal('breaker.' + f.key); body.breaker[f.key] = v === undefined ? 0 : v; }
        const known = !isNew && forms.get(acct.account);
        if (known && known.account) {
          for (const k of keptAccountFields) if (known.account[k] != null) body[k] = known.account[k];
        }
        try {
          const saved = await api('PUT', '/v1/accounts/' + enc(id), body);
          form.dataset.dirty = '';
          dirtyNote.hidden = true;
          const m = t('acct.saved', { id });
          setText(msg, m);
          announce(m);
          if (isNew) { form.reset(); await refresh(); }
          else { update(saved); fill(form, saved, true); }
        } catch (ex) {
          setText(msg, t('acct.notSaved', { msg: errorText(ex) }));
          for (const fe of (ex.problem && ex.problem.errors) || []) {
            const name = fe.field === 'account' ? 'account' : fe.field;
            const inp = form.elements[name];
            if (!inp) continue;
            inp.setAttribute('aria-invalid', 'true');
            const err = document.getElementById(inp.id + '-err');
            if (err) err.textContent = fe.message;
          }
          const bad = form.querySelector('[aria-invalid="true"]');
          if (bad) bad.focus();
        }
      });
      return form;
    }

    function fill(form, a, force) {
      if (!force && (form.dataset.dirty || form.contains(document.activeElement))) return;
      for (const f of accountFields) form.elements[f.key].value = a[f.key] ?? '';
      for (const f of breakerFields) form.elements['breaker.' + f.key].value = (a.breaker && a.breaker[f.key]) ?? 0;
    }

    function card(a) {
      const form = accountForm(a);
      const info = h('dl', { class: 'facts' },
        h('dt', {}, t('acct.batchRate')), h('dd', { class: 'batch-rate' }),
        h('dt', {}, t('acct.pacing')), h('dd', { class: 'pacing' }),
        h('dt', {}, t('acct.updated')), h('dd', { class: 'updated-at' }),
        h('dt', {}, t('acct.sizing')), h('dd', { class: 'sizing' }));
      const breakerState = h('div', { class: 'breaker-state' });
      const hid = 'acct-h-' + forms.size;
      const rateText = h('p', { class: 'rate-now' });
      const rateChart = h('div', { class: 'chart rate-chart' });
      const historyBody = h('tbody', { class: 'history-body' });
      const historyNone = h('p', { class: 'muted history-none', hidden: true }, t('acct.historyNone'));
      const history = h('div', { class: 'breaker-history' },
        h('h3', {}, t('acct.history')), h('p', { class: 'muted small' }, t('acct.historyHelp')), historyNone,
        h('table', { class: 'small' },
          h('thead', {}, h('tr', {}, ['acct.historyAt', 'acct.historyTransition', 'acct.historyFigures', 'acct.historyReason'].map((k) => h('th', { scope: 'col' }, t(k))))),
          historyBody));
      const sec = h('section', { class: 'card account', 'data-account': a.account, 'aria-labelledby': hid },
        h('h2', { id: hid }, a.account), info,
        h('h3', {}, t('acct.sendRate')), rateText, rateChart, h('p', { class: 'muted small' }, t('acct.sendRateHelp')),
        breakerState, history, form);
      forms.set(a.account, { sec, form, info, breakerState, rateText, rateChart, historyBody, historyNone, seriesAt: 0 });
      return sec;
    }

    // drawHistory lists the breaker's transitions, newest first, with the
    // figures that tripped it.
    function drawHistory(c, res) {
      const trs = res.transitions || [];
      c.historyNone.hidden = trs.length > 0;
      syncRows(c.historyBody, trs, (tr) => tr.seq, () => h('tr', {}, h('td'), h('td'), h('td'), h('td')), (row, tr) => {
        const figures = [];
        if (tr.attempts > 0) figures.push(t('acct.historyRate', { rate: pct(tr.failure_rate), n: num(tr.attempts) }));
        if (tr.consecutive_failures > 0) figures.push(t('acct.historyStreak', { n: num(tr.consecutive_failures) }));
        if (tr.to === 'open' && tr.until) figures.push(t('acct.historyUntil', { time: fmtTime(tr.until) }));
        row.dataset.to = tr.to;
        setText(row.children[0], fmtTime(tr.at));
        setText(row.children[1], tOr('breaker.', tr.from) + ' → ' + tOr('breaker.', tr.to));
        setText(row.children[2], figures.join('; ') || '–');
        setText(row.children[3], tr.reason);
      });
    }

    function update(a) {
      const c = forms.get(a.account);
      setText($('.batch-rate', c.info), t('rate.value', { r: a.batch_rate_per_sec }) + ' = ' +
        t('acct.batchFormula', { rate: a.rate_per_sec, reserve: a.online_reserve_per_sec }));
      setText($('.pacing', c.info), a.pacing && a.pacing.mode === 'random'
        ? t('acct.pacingRandom', { ms: a.pacing.min_gap_ms }) : t('acct.pacingBucket'));
      c.account = a;
      setText($('.updated-at', c.info), a.updated_at ? fmtTime(a.updated_at) : t('none'));
      // What the senders chose from the account's measured latency.
      const z = a.sizing;
      const sizing = $('.sizing', c.info);
      sizing.dataset.batch = z ? String(z.batch_size) : '';
      sizing.dataset.concurrency = z ? String(z.concurrency) : '';
      setText(sizing, z
        ? t('acct.sizingValue', { batch: z.batch_size, limit: a.max_recipients_per_call, conc: z.concurrency, p99: z.p99_ms })
        : t('acct.sizingNone', { batch: Math.max(1, Math.floor(0.8 * a.max_recipients_per_call)), limit: a.max_recipients_per_call }));
      // The breaker state is shown when the server reports it.
      const bs = a.breaker_state;
      if (bs && typeof bs === 'object') {
        const items = Object.entries(bs).map(([k, v]) => {
          let val = v === null || v === undefined ? t('none') : typeof v === 'object' ? JSON.stringify(v) : String(v);
          if (k === 'state') val = tOr('breaker.', String(v));
          else if (/_at$|until$/.test(k) && typeof v === 'string') val = fmtTime(v);
          return [h('dt', {}, tOr('breakerKey.', k)), h('dd', { 'data-key': k }, val)];
        });
        const state = String(bs.state || '');
        c.breakerState.replaceChildren(h('h3', {}, t('acct.breakerState'), ' ',
          h('span', { class: 'badge br-' + state.replace(/[^\w-]/g, '') }, state ? tOr('breaker.', state) : t('none'))),
        h('dl', { class: 'facts' }, items));
      } else {
        c.breakerState.replaceChildren();
      }
      fill(c.form, a, false);
    }

    async function refresh() {
      const res = await api('GET', '/v1/accounts');
      const accts = res.accounts || [];
      empty.hidden = accts.length > 0;
      for (const a of accts) {
        if (!forms.has(a.account)) list.append(card(a));
        update(a);
      }
      const now = Date.now();
      await Promise.all(accts.filter((a) => now - forms.get(a.account).seriesAt >= cfg.seriesPollMs).map(async (a) => {
        const c = forms.get(a.account);
        c.seriesAt = now;
        const [res, hist] = await Promise.all([
          api('GET', '/v1/accounts/' + enc(a.account) + '/series' + qs({ minutes: cfg.seriesMinutes })),
          api('GET', '/v1/accounts/' + enc(a.account) + '/breaker/history')]);
        drawRate(c, res);
        drawHistory(c, hist);
      }));
    }

    // drawRate shows the account's sends per second, minute by minute,
    // against its batch rate.
    function drawRate(c, res) {
      const minutes = minuteGrid(res.from, res.to);
      const byMinute = new Map(res.points.map((p) => [Date.parse(p.at), p]));
      const sent = minutes.map((m) => ((byMinute.get(m) || {}).sent || 0));
      // The current minute is partial: its rate is over the seconds gone.
      const cur = minutes[minutes.length - 1];
      const gone = Math.min(60, Math.max(1, (Date.now() - cur) / 1000));
      const perSec = sent.map((n, i) => (i === sent.length - 1 ? n / gone : n / 60));
      const fmt1 = (v) => new Intl.NumberFormat(locale(), { maximumFractionDigits: 1 }).format(v);
      const last = gone >= 10 || sent.length < 2 ? perSec[perSec.length - 1] : perSec[perSec.length - 2];
      c.rateText.dataset.rate = String(last);
      c.rateText.dataset.batch = String(res.batch_rate_per_sec);
      setText(c.rateText, t('acct.rateNow', { r: fmt1(last), batch: fmt1(res.batch_rate_per_sec) }));
      lineChart(c.rateChart, {
        lines: [{ key: 'sent', label: t('acct.sentPerSec'), values: perSec.map((v) => Math.round(v * 10) / 10) }],
        minutes, limit: res.batch_rate_per_sec, limitLabel: t('acct.batchRate') + ' ' + fmt1(res.batch_rate_per_sec),
        empty: t('acct.noSends'), label: (vals) => t('acct.rateLabel', { window: fmtDuration(minutes.length * 60), values: vals }),
      });
    }

    return {
      nav: '#/accounts',
      render() {
        forms.clear();
        list = h('div', { id: 'accounts-list' });
        empty = h('p', { class: 'muted', hidden: true }, t('acct.none'));
        main().replaceChildren(
          h('h1', {}, t('acct.title')),
          h('p', { class: 'muted' }, t('acct.help')),
          empty, list,
          h('section', { class: 'card', id: 'new-account-card', 'aria-labelledby': 'new-account-h' },
            h('h2', { id: 'new-account-h' }, t('acct.new')), accountForm(null)));
      },
      poll: refresh,
    };
  }

  // ----------------------------------------------------------- schedules

  // nextFirings computes the next n firings (ms, UTC) of an EventBridge
  // schedule after `after`: rate(N unit) counts on from the server's next
  // firing; cron(min hour dom month dow year) is evaluated here (lists,
  // ranges, steps, names; not L, W or #) as wall-clock time in `zone` (an
  // IANA name; '' is UTC): a time a daylight-saving change skips does not
  // fire, one it repeats fires once, as EventBridge Scheduler does. null
  // when it cannot say.
  function nextFirings(schedule, nextAt, after, n, zone) {
    const out = [];
    let m = /^rate\((\d+)\s+(minute|minutes|hour|hours|day|days)\)$/.exec(schedule || '');
    if (m) {
      const unit = { minute: 60e3, hour: 3600e3, day: 86400e3 }[m[2].replace(/s$/, '')];
      const step = Number(m[1]) * unit;
      let tm = nextAt ? Date.parse(nextAt) : after;
      while (out.length < n) { out.push(tm); tm += step; }
      return out;
    }
    m = /^cron\((.+)\)$/.exec(schedule || '');
    if (!m) return null;
    const f = m[1].trim().split(/\s+/);
    if (f.length !== 6 || /[LW#]/.test(f.join(' '))) return null;
    const names = { JAN: 1, FEB: 2, MAR: 3, APR: 4, MAY: 5, JUN: 6, JUL: 7, AUG: 8, SEP: 9, OCT: 10, NOV: 11, DEC: 12,
      SUN: 1, MON: 2, TUE: 3, WED: 4, THU: 5, FRI: 6, SAT: 7 };
    const field = (src, lo, hi) => {
      if (src === '*' || src === '?') return null; // any
      const set = new Set();
      for (const part of src.split(',')) {
        const [range, stepS] = part.split('/');
        const step = stepS ? Number(stepS) : 1;
        let a = lo, b = hi;
        if (range !== '*') {
          const [x, y] = range.split('-').map((v) => (v.toUpperCase() in names ? names[v.toUpperCase()] : Number(v)));
          a = x; b = y === undefined ? (stepS ? hi : x) : y;
        }
        if (!Number.isFinite(a) || !Number.isFinite(b) || !(step > 0)) throw new Error('bad cron');
        for (let v = a; v <= b; v += step) set.add(v);
      }
      return set;
    };
    let sets, wallOf;
    try {
      sets = { min: field(f[0], 0, 59), hour: field(f[1], 0, 23), dom: field(f[2], 1, 31), mon: field(f[3], 1, 12), dow: field(f[4], 1, 7), year: field(f[5], 1970, 2199) };
      wallOf = zoneWall(zone);
    } catch (e) { return null; }
    // The first instant whose wall clock is `wall` (ms, wall clock written
    // as UTC), or null when the zone skips it; the offsets a day either
    // side are the only candidates.
    const instant = (wall) => {
      let first = null;
      for (const probe of [wall - 86400e3, wall + 86400e3]) {
        const at = wall - (wallOf(probe) - probe);
        if (wallOf(at) === wall && (first === null || at < first)) first = at;
      }
      return first;
    };
    const ok = (set, v) => set === null || set.has(v);
    let d = new Date(Math.floor(wallOf(after) / 60000) * 60000 + 60000);
    for (let guard = 0; guard < 600000 && out.length < n; guard++) {
      if (!ok(sets.year, d.getUTCFullYear()) || !ok(sets.mon, d.getUTCMonth() + 1) ||
          !ok(sets.dom, d.getUTCDate()) || !ok(sets.dow, d.getUTCDay() + 1)) {
        d = new Date(Date.UTC(d.getUTCFullYear(), d.getUTCMonth(), d.getUTCDate() + 1));
        continue;
      }
      if (!ok(sets.hour, d.getUTCHours())) { d = new Date(d.getTime() + (60 - d.getUTCMinutes()) * 60000); continue; }
      if (ok(sets.min, d.getUTCMinutes())) {
        const at = instant(d.getTime());
        if (at !== null && at > after && (!out.length || at > out[out.length - 1])) out.push(at);
      }
      d = new Date(d.getTime() + 60000);
    }
    return out;
  }

  // zoneWall returns a function from an instant (ms) to its wall clock in
  // the IANA zone (ms, written as UTC); throws on a zone the browser does
  // not know.
  function zoneWall(zone) {
    if (!zone || zone === 'UTC') return (ms) => ms;
    const fmt = new Intl.DateTimeFormat('en-US', { timeZone: zone, hourCycle: 'h23', year: 'numeric', month: 'numeric', day: 'numeric',
      hour: 'numeric', minute: 'numeric', second: 'numeric' });
    return (ms) => {
      const p = {};
      for (const { type, value } of fmt.formatToParts(new Date(ms))) p[type] = Number(value);
      return Date.UTC(p.year, p.month - 1, p.day, p.hour, p.minute, p.second) + (((ms % 1000) + 1000) % 1000);
    };
  }

  // formMsg shows an API error on a form: the message, and each field error
  // next to its field (inputs named like the API's fields).
  function formError(form, msg, ex) {
    setText(msg, t('err.action', { msg: errorText(ex) }));
    announce(msg.textContent);
    for (const fe of (ex && ex.problem && ex.problem.errors) || []) {
      const inp = form.elements[fe.field];
      if (inp && inp.setAttribute) inp.setAttribute('aria-invalid', 'true');
    }
  }

  function field(id, labelKey, input, helpKey) {
    input.id = id;
    return h('div', { class: 'field' }, h('label', { for: id }, t(labelKey)), input,
      helpKey ? h('span', { class: 'muted small', id: id + '-help' }, t(helpKey)) : null);
  }

  // parseCSV reads RFC 4180 CSV (quoted fields, doubled quotes, CRLF or LF)
  // into rows of strings.
  function parseCSV(text) {
    const rows = [];
    let row = [], cell = '', q = false;
    text = text.replace(/^\ufeff/, '');
    for (let i = 0; i < text.length; i++) {
      const ch = text[i];
      if (q) {
        if (ch === '"') { if (text[i + 1] === '"') { cell += '"'; i++; } else q = false; }
        else cell += ch;
      } else if (ch === '"' && cell === '') q = true;
      else if (ch === ',') { row.push(cell); cell = ''; }
      else if (ch === '\n' || ch === '\r') {
        if (ch === '\r' && text[i + 1] === '\n') i++;
        row.push(cell); cell = '';
        if (row.length > 1 || row[0] !== '') rows.push(row);
        row = [];
      } else cell += ch;
    }
    if (cell !== '' || row.length) { row.push(cell); rows.push(row); }
    return rows;
  }

  async function readFile(file) {
    if (file.text) return file.text();
    return new Promise((resolve, reject) => {
      const r = new FileReader();
      r.onload = () => resolve(String(r.result));
      r.onerror = () => reject(r.error);
      r.readAsText(file);
    });
  }

  // ----------------------------------------------------------- campaigns

  function campaignsPage() {
    let tbody, empty;
    function createForm() {
      const msg = h('p', { class: 'msg', role: 'status', id: 'campaign-msg' });
      const inp = (name, attrs) => h('input', Object.assign({ name, type: 'text' }, attrs || {}));
      const mode = h('select', { name: 'mode' }, h('option', { value: 'snapshot' }, t('camp.mode.snapshot')), h('option', { value: 'requery' }, t('camp.mode.requery')));
      const form = h('form', { id: 'campaign-form', class: 'card', novalidate: true },
        h('h2', {}, t('camp.new')),
        h('div', { class: 'grid' },
          field('camp-id', 'camp.id', inp('id', { required: true }), 'camp.id.help'),
          field('camp-name', 'camp.name', inp('name', { required: true })),
          field('camp-schedule', 'camp.schedule', inp('schedule', { required: true, placeholder: 'cron(0 9 ? * MON *)' }), 'camp.schedule.help'),
          field('camp-timezone', 'camp.timezone', inp('timezone', { placeholder: 'Asia/Shanghai', list: 'camp-zones', autocomplete: 'off', 'aria-describedby': 'camp-timezone-help camp-timezone-default' }), 'camp.timezone.help'),
          field('camp-mode', 'camp.mode', mode),
          field('camp-source', 'camp.source', inp('source', { type: 'url' }), 'camp.source.help'),
          field('camp-maxdelay', 'camp.maxDelay', inp('max_delay_sec', { type: 'number', min: 0, step: 1, value: 0 }), 'camp.maxDelay.help')),
        field('camp-template', 'camp.template', h('textarea', { name: 'template', rows: 3, required: true })),
        field('camp-recipients', 'camp.recipients', h('textarea', { name: 'recipients', rows: 4, placeholder: 'account,to,var.name' }), 'camp.recipients.help'),
        // The stack's default zone, which an empty time zone stands for
        // (from the list: refresh).
        h('p', { class: 'muted small', id: 'camp-timezone-default', hidden: true }),
        h('datalist', { id: 'camp-zones' }, ...((Intl.supportedValuesOf && Intl.supportedValuesOf('timeZone')) || []).map((z) => h('option', { value: z }))),
        h('div', { class: 'actions' }, h('button', { type: 'submit', class: 'primary', id: 'campaign-create' }, t('camp.create'))), msg);
      form.addEventListener('submit', async (e) => {
        e.preventDefault();
        for (const el of form.querySelectorAll('[aria-invalid]')) el.removeAttribute('aria-invalid');
        const v = (n) => form.elements[n].value.trim();
        const body = { id: v('id'), name: v('name'), schedule: v('schedule'), mode: v('mode'), max_delay_sec: Number(v('max_delay_sec') || 0),
          request: { name: v('name'), template: form.elements.template.value } };
        if (v('timezone')) body.timezone = v('timezone');
        if (body.mode === 'requery') body.source = v('source');
        else {
          const parsed = recipientsFromCSV(form.elements.recipients.value);
          if (parsed.error) { setText(msg, parsed.error); form.elements.recipients.setAttribute('aria-invalid', 'true'); return; }
          body.request.recipients = parsed.recipients;
        }
        try {
          await api('POST', '/v1/campaigns', body);
          const m = t('camp.saved', { id: body.id });
          setText(msg, m);
          announce(m);
          form.reset();
          await refresh();
        } catch (ex) { formError(form, msg, ex); }
      });
      return form;
    }
    async function refresh() {
      const res = await api('GET', '/v1/campaigns');
      const list = res.campaigns || [];
      empty.hidden = list.length > 0;
      const def = $('#camp-timezone-default');
      if (def && res.default_timezone) {
        setText(def, t('camp.timezone.default', { zone: res.default_timezone }));
        def.hidden = false;
        $('#campaign-form input[name=timezone]').placeholder = res.default_timezone;
      }
      syncRows(tbody, list, (c) => c.id, (c) => h('tr', { 'data-campaign': c.id },
        h('td', {}, h('a', { href: '#/campaigns/' + enc(c.id), class: 'campaign-link' }), h('div', { class: 'muted small mono' }, c.id)),
        h('td', { class: 'mono schedule' }), h('td', { class: 'enabled' }), h('td', { class: 'next' }), h('td', { class: 'last' })),
      (tr, c) => {
        setText($('a', tr), c.name || c.id);
        // A campaign without a zone of its own shows the stack's, marked.
        const zone = c.timezone || (c.effective_timezone && t('camp.timezone.defaultMark', { zone: c.effective_timezone }));
        setText($('.schedule', tr), zone ? c.schedule + ' · ' + zone : c.schedule);
        setText($('.enabled', tr), c.enabled ? t('camp.on') : t('camp.off'));
        setText($('.next', tr), c.next_fire_at ? fmtTime(c.next_fire_at) : t('none'));
        setText($('.last', tr), c.last_fired_at ? fmtTime(c.last_fired_at) : t('never'));
      });
    }
    return {
      nav: '#/campaigns',
      render() {
        tbody = h('tbody', { id: 'campaigns-body' });
        empty = h('p', { class: 'muted', id: 'campaigns-empty', hidden: true }, t('camp.none'));
        main().replaceChildren(h('h1', {}, t('camp.title')), h('p', { class: 'muted' }, t('camp.help')),
          h('div', { class: 'scroll' }, h('table', { id: 'campaigns-table' }, h('caption', { class: 'sr-only' }, t('camp.title')),
            h('thead', {}, h('tr', {}, ['camp.name', 'camp.schedule', 'camp.enabled', 'camp.next', 'camp.last'].map((k) => h('th', { scope: 'col' }, t(k))))),
            tbody)), empty, createForm());
      },
      poll: refresh,
    };
  }

  // recipientsFromCSV reads "account,to[,ref][,var.<name>...]" CSV text.
  function recipientsFromCSV(text) {
    const rows = parseCSV(text || '');
    if (!rows.length) return { recipients: [] };
    const head = rows[0].map((c) => c.trim());
    const ai = head.indexOf('account'), ti = head.indexOf('to'), ri = head.indexOf('ref');
    if (ai < 0 || ti < 0) return { error: t('csv.header') };
    const vars = head.map((c, i) => (c.startsWith('var.') ? [i, c.slice(4)] : null)).filter(Boolean);
    const recipients = [];
    for (let r = 1; r < rows.length; r++) {
      const row = rows[r];
      if (!row[ai] || !row[ti]) return { error: t('csv.row', { line: r + 1 }) };
      const rec = { account: row[ai].trim(), to: row[ti].trim() };
      if (ri >= 0 && row[ri]) rec.ref = row[ri];
      if (vars.length) { rec.vars = {}; for (const [i, name] of vars) rec.vars[name] = row[i] ?? ''; }
      recipients.push(rec);
      if (recipients.length > cfg.csvMaxRecipients) return { error: t('csv.tooMany', { max: num(cfg.csvMaxRecipients) }) };
    }
    return { recipients };
  }

  function campaignPage(id) {
    let facts, nextList, jobsBody, jobsEmpty;
    return {
      nav: '#/campaigns',
      render() {
        facts = h('dl', { class: 'facts', id: 'campaign-facts' });
        nextList = h('ol', { id: 'campaign-next' });
        jobsBody = h('tbody', { id: 'campaign-jobs' });
        jobsEmpty = h('p', { class: 'muted', id: 'campaign-jobs-empty', hidden: true }, t('camp.noFirings'));
        main().replaceChildren(h('p', {}, h('a', { href: '#/campaigns' }, t('camp.back'))), h('h1', { id: 'campaign-name' }, id),
          h('section', { class: 'card' }, facts),
          h('section', { 'aria-labelledby': 'next-h' }, h('h2', { id: 'next-h' }, t('camp.nextFirings')), nextList, h('p', { class: 'muted small' }, t('camp.utc'))),
          h('section', { 'aria-labelledby': 'past-h' }, h('h2', { id: 'past-h' }, t('camp.pastFirings')),
            h('table', {}, h('thead', {}, h('tr', {}, ['jobs.name', 'jobs.status', 'jobs.progress', 'jobs.started'].map((k) => h('th', { scope: 'col' }, t(k))))), jobsBody),
            jobsEmpty, h('p', { class: 'muted small' }, t('camp.pastHelp'))));
      },
      async poll() {
        const c = await api('GET', '/v1/campaigns/' + enc(id));
        setText($('#campaign-name'), c.name || c.id);
        facts.replaceChildren(...[['camp.schedule', c.schedule], ['camp.timezone', c.timezone || t('camp.timezone.stack', { zone: c.effective_timezone || 'UTC' })], ['camp.mode', tOr('camp.mode.', c.mode)], ['camp.enabled', c.enabled ? t('camp.on') : t('camp.off')],
          ['camp.last', c.last_fired_at ? fmtTime(c.last_fired_at) : t('never')], ['camp.maxDelay', String(c.max_delay_sec)]]
          .flatMap(([k, v]) => [h('dt', {}, t(k)), h('dd', {}, v)]));
        let next = c.enabled ? nextFirings(c.schedule, c.next_fire_at, Date.now(), cfg.nextFirings, c.timezone || c.effective_timezone) : [];
        // Without a zone of its own the campaign follows the stack's, which
        // the server knows: its next firing is the truth.
        if (next && next.length && c.next_fire_at && next[0] !== Date.parse(c.next_fire_at)) next = null;
        nextList.replaceChildren(...(next === null ? [h('li', {}, c.next_fire_at ? fmtTime(c.next_fire_at) : t('none'))]
          : next.length ? next.map((tm) => h('li', { 'data-at': new Date(tm).toISOString() }, fmtTime(new Date(tm).toISOString()))) : [h('li', {}, t('camp.off'))]));
        // Its firings are the jobs it created ("campaign:<id>").
        const jobs = [];
        let cursor = '';
        for (let i = 0; i < cfg.campaignJobPages; i++) {
          const page = await api('GET', '/v1/jobs' + qs({ cursor }));
          jobs.push(...page.jobs.filter((j) => j.created_by === 'campaign:' + id));
          cursor = page.next_cursor || '';
          if (!cursor) break;
        }
        jobsEmpty.hidden = jobs.length > 0;
        syncRows(jobsBody, jobs, (j) => j.id, (j) => h('tr', { 'data-job-id': j.id },
          h('td', {}, h('a', { href: '#/jobs/' + enc(j.id) }, j.name || j.id)), h('td', {}, statusBadge(j.status, j.pause_reason)), h('td', { class: 'p' }), h('td', { class: 's' })),
        (tr, j) => {
          updateBadge($('.badge', tr), j.status, j.pause_reason);
          setText($('.p', tr), t('progress.short', { done: num(doneOf(j.counts)), total: num(j.total) }));
          setText($('.s', tr), j.started_at ? fmtTime(j.started_at) : t('notStarted'));
        });
      },
    };
  }

  // -------------------------------------------------------- suppressions

  function suppressionsPage() {
    let tbody, empty, more, cursor = '', found = [], query = '';
    async function load(reset) {
      if (reset) { cursor = ''; found = []; tbody.replaceChildren(); }
      let scanned = 0;
      do {
        const page = await api('GET', '/v1/suppressions' + qs({ cursor, limit: 500 }));
        for (const e of page.suppressions) {
          scanned++;
          if (!query || (e.account + ' ' + e.to + ' ' + e.reason).toLowerCase().includes(query)) found.push(e);
        }
        cursor = page.next_cursor || '';
      } while (cursor && found.length < 100 && scanned < 5000);
      more.hidden = !cursor;
      empty.hidden = found.length > 0;
      syncRows(tbody, found, (e) => e.account + '\u0000' + e.to, (e) => h('tr', { 'data-account': e.account, 'data-to': e.to },
        h('td', {}, e.account), h('td', {}, e.to), h('td', {}, e.reason), h('td', {}, fmtTime(e.created_at)),
        h('td', {}, h('button', { type: 'button', class: 'remove', 'aria-label': t('supp.removeFor', { to: e.to, account: e.account }), onclick: () => remove(e) }, t('supp.remove')))),
      () => {});
    }
    async function remove(e) {
      const ok = await confirmDialog({ title: t('supp.remove.title', { to: e.to }), body: [t('supp.remove.body')], yes: t('supp.remove') });
      if (!ok) return;
      try {
        await api('DELETE', '/v1/suppressions/' + enc(e.account) + '/' + enc(e.to));
        announce(t('supp.removed', { to: e.to }));
        await load(true);
      } catch (ex) { showBanner(t('err.action', { msg: errorText(ex) })); }
    }
    return {
      nav: '#/suppressions',
      render() {
        tbody = h('tbody', { id: 'supp-body' });
        empty = h('p', { class: 'muted', id: 'supp-empty', hidden: true }, t('supp.none'));
        more = h('button', { type: 'button', id: 'supp-more', hidden: true, onclick: () => load(false).catch((e) => showBanner(errorText(e))) }, t('supp.more'));
        const search = h('input', { id: 'supp-search', type: 'search', name: 'q' });
        const searchForm = h('form', { id: 'supp-search-form', class: 'filters', role: 'search' },
          h('label', { for: 'supp-search' }, t('supp.search')), search, h('button', { type: 'submit' }, t('supp.searchBtn')));
        searchForm.addEventListener('submit', (e) => { e.preventDefault(); query = search.value.trim().toLowerCase(); load(true).catch((ex) => showBanner(errorText(ex))); });
        const addMsg = h('p', { class: 'msg', role: 'status', id: 'supp-add-msg' });
        const addForm = h('form', { id: 'supp-add', class: 'card', novalidate: true }, h('h2', {}, t('supp.add')),
          h('div', { class: 'grid' }, field('supp-account', 'supp.account', h('input', { name: 'account', required: true })),
            field('supp-to', 'supp.to', h('input', { name: 'to', required: true })), field('supp-reason', 'supp.reason', h('input', { name: 'reason' }))),
          h('div', { class: 'actions' }, h('button', { type: 'submit', class: 'primary' }, t('supp.addBtn'))), addMsg);
        addForm.addEventListener('submit', async (e) => {
          e.preventDefault();
          const a = addForm.elements.account.value.trim(), to = addForm.elements.to.value.trim();
          if (!a || !to) { setText(addMsg, t('supp.needBoth')); return; }
          try {
            await api('PUT', '/v1/suppressions/' + enc(a) + '/' + enc(to), { reason: addForm.elements.reason.value });
            setText(addMsg, t('supp.added', { to }));
            announce(addMsg.textContent);
            addForm.reset();
            await load(true);
          } catch (ex) { formError(addForm, addMsg, ex); }
        });
        const impMsg = h('p', { class: 'msg', role: 'status', id: 'supp-import-msg' });
        const file = h('input', { type: 'file', id: 'supp-file', accept: '.csv,text/csv' });
        const impForm = h('form', { id: 'supp-import', class: 'card', novalidate: true }, h('h2', {}, t('supp.import')),
          h('p', { class: 'muted small' }, t('supp.import.help')), h('label', { for: 'supp-file' }, t('supp.file')), file,
          h('div', { class: 'actions' }, h('button', { type: 'submit', class: 'primary' }, t('supp.importBtn'))), impMsg);
        impForm.addEventListener('submit', async (e) => {
          e.preventDefault();
          const f = file.files && file.files[0];
          if (!f) { setText(impMsg, t('csv.choose')); return; }
          if (f.size > cfg.csvMaxBytes) { setText(impMsg, t('csv.tooBig', { size: num(Math.ceil(f.size / 1024)), max: num(cfg.csvMaxBytes / 1024) })); return; }
          const rows = parseCSV(await readFile(f));
          const head = (rows[0] || []).map((c) => c.trim());
          const ai = head.indexOf('account'), ti = head.indexOf('to'), ri = head.indexOf('reason');
          if (ai < 0 || ti < 0) { setText(impMsg, t('supp.import.header')); return; }
          const entries = rows.slice(1).filter((r) => r[ai] && r[ti]).map((r) => ({ account: r[ai].trim(), to: r[ti].trim(), reason: ri >= 0 ? r[ri] || '' : '' }));
          let added = 0;
          try {
            for (let i = 0; i < entries.length; i += 500) {
              const res = await api('POST', '/v1/suppressions', { entries: entries.slice(i, i + 500) });
              added += res.added || 0;
              setText(impMsg, t('supp.importing', { n: num(Math.min(i + 500, entries.length)), total: num(entries.length) }));
            }
            setText(impMsg, t('supp.imported', { n: num(entries.length) }));
            announce(impMsg.textContent);
            await load(true);
          } catch (ex) { formError(impForm, impMsg, ex); }
        });
        main().replaceChildren(h('h1', {}, t('supp.title')), h('p', { class: 'muted' }, t('supp.help')), searchForm,
          h('div', { class: 'scroll' }, h('table', { id: 'supp-table' }, h('caption', { class: 'sr-only' }, t('supp.title')),
            h('thead', {}, h('tr', {}, ['supp.account', 'supp.to', 'supp.reason', 'supp.created', 'supp.actions'].map((k) => h('th', { scope: 'col' }, t(k))))), tbody)),
          empty, h('div', { class: 'pager' }, more), addForm, impForm);
        load(true).catch((e) => showBanner(t('err.poll', { msg: errorText(e) })));
      },
    };
  }

  // ------------------------------------------------------------ tokens

  // The tenant's API tokens (admin tokens only; others see why not): list,
  // create (the secret is shown once), revoke.
  function tokensPage() {
    let tbody, empty, denied;
    async function refresh() {
      let res;
      try {
        res = await api('GET', '/v1/tokens');
      } catch (e) {
        if (e instanceof APIError && e.status === 403) { denied.hidden = false; return; }
        throw e;
      }
      denied.hidden = true;
      empty.hidden = res.tokens.length > 0;
      syncRows(tbody, res.tokens, (k) => k.id, (k) => h('tr', { 'data-token': k.id },
        h('td', { class: 'mono' }, k.id), h('td', {}, k.name), h('td', {}, tOr('role.', k.role)),
        h('td', {}, fmtTime(k.created_at)), h('td', {}, k.expires_at ? fmtTime(k.expires_at) : t('tok.never')),
        h('td', {}, h('button', { type: 'button', class: 'danger revoke', 'aria-label': t('tok.revokeFor', { name: k.name }), onclick: () => revoke(k) }, t('tok.revoke')))),
      () => {});
    }
    async function revoke(k) {
      const ok = await confirmDialog({ title: t('tok.revoke.title', { name: k.name }), body: [t('tok.revoke.body')], yes: t('tok.revoke'), danger: true });
      if (!ok) return;
      try {
        await api('DELETE', '/v1/tokens/' + enc(k.id));
        announce(t('tok.revoked'));
        tbody.replaceChildren();
        await refresh();
      } catch (ex) { showBanner(t('err.action', { msg: errorText(ex) })); }
    }
    return {
      nav: '#/tokens',
      render() {
        tbody = h('tbody', { id: 'tokens-body' });
        empty = h('p', { class: 'muted', id: 'tokens-empty', hidden: true }, t('tok.none'));
        denied = h('p', { class: 'muted', id: 'tokens-denied', hidden: true }, t('tok.denied'));
        const msg = h('p', { class: 'msg', role: 'status', id: 'tok-msg' });
        const secretOut = h('p', { id: 'tok-secret', class: 'mono', hidden: true });
        const role = h('select', { name: 'role', id: 'tok-role' }, ['read', 'operate', 'admin'].map((r) => h('option', { value: r }, tOr('role.', r))));
        const form = h('form', { id: 'tok-form', class: 'card', novalidate: true }, h('h2', {}, t('tok.new')),
          field('tok-name', 'tok.name', h('input', { name: 'name', type: 'text', required: true, maxlength: 100 })),
          field('tok-role', 'tok.role', role),
          field('tok-expires', 'tok.expires', h('input', { name: 'expires', type: 'date' }), 'tok.expires.help'),
          h('div', { class: 'actions' }, h('button', { type: 'submit', class: 'primary', id: 'tok-create' }, t('tok.create'))), msg, secretOut);
        form.addEventListener('submit', async (e) => {
          e.preventDefault();
          const body = { name: form.elements.name.value.trim(), role: form.elements.role.value };
          if (form.elements.expires.value) body.expires_at = new Date(form.elements.expires.value + 'T00:00:00Z').toISOString();
          try {
            const k = await api('POST', '/v1/tokens', body);
            setText(msg, t('tok.created', { id: k.id }));
            secretOut.hidden = false;
            setText(secretOut, t('tok.secretShown', { token: k.token }));
            announce(msg.textContent);
            form.reset();
            await refresh();
          } catch (ex) { formError(form, msg, ex); }
        });
        main().replaceChildren(h('h1', {}, t('tok.title')), h('p', { class: 'muted' }, t('tok.help')), denied,
          h('div', { class: 'scroll' }, h('table', { id: 'tokens-table' }, h('caption', { class: 'sr-only' }, t('tok.title')),
            h('thead', {}, h('tr', {}, ['tok.id', 'tok.name', 'tok.role', 'tok.createdAt', 'tok.expiresAt', 'tok.actions'].map((k) => h('th', { scope: 'col' }, t(k))))), tbody)),
          empty, form);
      },
      poll: refresh,
    };
  }

  // ------------------------------------------------------------ webhooks

  const webhookEvents = ['job.started', 'job.paused', 'job.canary_ready', 'job.finished', 'job.dead_letters', 'job.items_need_review', 'items.outcomes'];
  // A WeCom group robot takes the job events and the operator alerts, not
  // per-recipient outcomes.
  const robotEvents = ['job.started', 'job.paused', 'job.canary_ready', 'job.finished', 'job.dead_letters', 'job.items_need_review',
    'breaker.opened', 'breaker.closed', 'counts.mismatch', 'campaign.skipped'];
  const robotDefaults = new Set(['job.paused', 'job.finished', 'job.dead_letters', 'breaker.opened', 'counts.mismatch']);

  function webhooksPage() {
    let tbody, empty;
    async function refresh() {
      const res = await api('GET', '/v1/webhooks');
      const list = res.webhooks || [];
      empty.hidden = list.length > 0;
      syncRows(tbody, list, (w) => w.id, (w) => h('tr', { 'data-webhook': w.id, 'data-kind': w.kind },
        h('td', {}, h('a', { href: '#/webhooks/' + enc(w.id), class: 'webhook-link mono' }, w.url)),
        h('td', {}, tOr('hook.kind.', w.kind || 'http')),
        h('td', { class: 'small' }, w.events.join(', ')), h('td', {}, fmtTime(w.created_at)),
        h('td', {}, h('button', { type: 'button', class: 'danger delete', 'aria-label': t('hook.deleteFor', { url: w.url }), onclick: () => del(w) }, t('hook.delete')))),
      () => {});
    }
    async function del(w) {
      const ok = await confirmDialog({ title: t('hook.delete.title', { url: w.url }), body: [t('hook.delete.body')], yes: t('hook.delete'), danger: true });
      if (!ok) return;
      try {
        await api('DELETE', '/v1/webhooks/' + enc(w.id));
        announce(t('hook.deleted'));
        tbody.replaceChildren();
        await refresh();
      } catch (ex) { showBanner(t('err.action', { msg: errorText(ex) })); }
    }
    return {
      nav: '#/webhooks',
      render() {
        tbody = h('tbody', { id: 'hooks-body' });
        empty = h('p', { class: 'muted', id: 'hooks-empty', hidden: true }, t('hook.none'));
        const msg = h('p', { class: 'msg', role: 'status', id: 'hook-msg' });
        const secretOut = h('p', { id: 'hook-secret', class: 'mono', hidden: true });
        const boxes = h('div', { id: 'hook-events' });
        const kindSel = h('select', { name: 'kind', id: 'hook-kind' },
          ['http', 'wecom_robot'].map((k) => h('option', { value: k }, t('hook.kind.' + k))));
        const urlIn = h('input', { name: 'url', type: 'url', required: true });
        const secretField = field('hook-secret-in', 'hook.secret', h('input', { name: 'secret', type: 'text', autocomplete: 'off' }), 'hook.secret.help');
        // The kind decides the events offered, the URL's example and
        // whether there is a secret (a robot's is the key in its URL).
        const showKind = () => {
          const robot = kindSel.value === 'wecom_robot';
          boxes.replaceChildren(...(robot ? robotEvents : webhookEvents).map((ev) => h('label', { class: 'check' },
            h('input', { type: 'checkbox', name: 'events', value: ev, checked: robot ? robotDefaults.has(ev) : ev !== 'items.outcomes' }), ' ' + ev)));
          urlIn.placeholder = robot ? 'https://qyapi.weixin.qq.com/cgi-bin/webhook/send?key=…' : 'https://crm.example.com/qunfa-events';
          secretField.hidden = robot;
        };
        kindSel.addEventListener('change', showKind);
        showKind();
        const form = h('form', { id: 'hook-form', class: 'card', novalidate: true }, h('h2', {}, t('hook.new')),
          field('hook-kind', 'hook.kind', kindSel, 'hook.kind.help'),
          field('hook-url', 'hook.url', urlIn),
          secretField,
          h('fieldset', {}, h('legend', {}, t('hook.events')), boxes),
          h('div', { class: 'actions' }, h('button', { type: 'submit', class: 'primary', id: 'hook-create' }, t('hook.create'))), msg, secretOut);
        form.addEventListener('submit', async (e) => {
          e.preventDefault();
          const kind = kindSel.value;
          let secret = form.elements.secret.value;
          if (!secret && kind === 'http') {
            const b = new Uint8Array(24);
            crypto.getRandomValues(b);
            secret = [...b].map((x) => x.toString(16).padStart(2, '0')).join('');
          }
          const events = [...form.querySelectorAll('input[name=events]:checked')].map((x) => x.value);
          const body = { kind, url: form.elements.url.value.trim(), events };
          if (kind === 'http') body.secret = secret;
          try {
            const w = await api('POST', '/v1/webhooks', body);
            setText(msg, t('hook.created', { id: w.id }));
            secretOut.hidden = kind !== 'http';
            setText(secretOut, kind === 'http' ? t('hook.secretShown', { secret }) : '');
            announce(msg.textContent);
            form.reset();
            showKind();
            await refresh();
          } catch (ex) { formError(form, msg, ex); }
        });
        main().replaceChildren(h('h1', {}, t('hook.title')), h('p', { class: 'muted' }, t('hook.help')),
          h('div', { class: 'scroll' }, h('table', { id: 'hooks-table' }, h('caption', { class: 'sr-only' }, t('hook.title')),
            h('thead', {}, h('tr', {}, ['hook.url', 'hook.kind', 'hook.events', 'hook.createdAt', 'hook.actions'].map((k) => h('th', { scope: 'col' }, t(k))))), tbody)),
          empty, form);
      },
      poll: refresh,
    };
  }

  function webhookPage(id) {
    let tbody, empty, msg;
    async function redeliver(d) {
      try {
        await api('POST', '/v1/webhooks/' + enc(id) + '/deliveries/' + enc(d.id) + '/redeliver');
        setText(msg, t('hook.redelivered', { id: d.id }));
        announce(msg.textContent);
      } catch (ex) { setText(msg, t('err.action', { msg: errorText(ex) })); }
    }
    return {
      nav: '#/webhooks',
      render() {
        tbody = h('tbody', { id: 'deliveries-body' });
        empty = h('p', { class: 'muted', id: 'deliveries-empty', hidden: true }, t('hook.noDeliveries'));
        msg = h('p', { class: 'msg', role: 'status', id: 'delivery-msg' });
        main().replaceChildren(h('p', {}, h('a', { href: '#/webhooks' }, t('hook.back'))), h('h1', {}, t('hook.deliveries')),
          h('p', { class: 'muted small mono' }, id), msg,
          h('div', { class: 'scroll' }, h('table', { id: 'deliveries-table' }, h('caption', { class: 'sr-only' }, t('hook.deliveries')),
            h('thead', {}, h('tr', {}, ['hook.event', 'hook.status', 'hook.attempts', 'hook.lastAnswer', 'hook.next', 'hook.createdAt', 'hook.actions'].map((k) => h('th', { scope: 'col' }, t(k))))), tbody)),
          empty);
      },
      async poll() {
        const res = await api('GET', '/v1/webhooks/' + enc(id) + '/deliveries' + qs({ limit: 100 }));
        const list = res.deliveries || [];
        empty.hidden = list.length > 0;
        syncRows(tbody, list, (d) => d.id, (d) => h('tr', { 'data-delivery': d.id },
          h('td', { class: 'mono small' }, d.event_type), h('td', {}, h('span', { class: 'badge' })), h('td', { class: 'num att' }), h('td', { class: 'ans small' }),
          h('td', { class: 'next' }), h('td', {}, fmtTime(d.created_at)),
          h('td', {}, h('button', { type: 'button', class: 'redeliver', 'aria-label': t('hook.redeliverFor', { event: d.event_type }), onclick: () => redeliver(d) }, t('hook.redeliver')))),
        (tr, d) => {
          const b = $('.badge', tr);
          b.className = 'badge dl-' + d.status;
          tr.dataset.status = d.status;
          setText(b, tOr('dstatus.', d.status));
          setText($('.att', tr), String(d.attempts));
          setText($('.ans', tr), d.last_status ? 'HTTP ' + d.last_status + (d.last_error ? ' · ' + d.last_error : '') : d.last_error || t('none'));
          setText($('.next', tr), d.status === 'pending' && d.next_attempt_at ? fmtTime(d.next_attempt_at) : t('none'));
        });
      },
    };
  }

  // -------------------------------------------------------------- new job

  function newJobPage() {
    let parsed = null;
    return {
      nav: '#/new-job',
      render() {
        const msg = h('p', { class: 'msg', role: 'status', id: 'newjob-msg' });
        const preview = h('div', { id: 'newjob-preview' });
        const file = h('input', { type: 'file', id: 'newjob-file', accept: '.csv,text/csv' });
        const form = h('form', { id: 'newjob-form', class: 'card', novalidate: true },
          field('newjob-name', 'newjob.name', h('input', { name: 'name', required: true })),
          field('newjob-template', 'newjob.template', h('textarea', { name: 'template', rows: 3, required: true, placeholder: 'Hi {{name}}, …' })),
          h('div', { class: 'field' }, h('label', { for: 'newjob-file' }, t('newjob.file')), file,
            h('span', { class: 'muted small' }, t('newjob.file.help', { max: num(cfg.csvMaxRecipients), mb: num(cfg.csvMaxBytes / 1048576) }))),
          preview,
          h('div', { class: 'grid' },
            field('newjob-budget', 'newjob.budget', h('input', { name: 'budget', type: 'number', min: 0, step: 1, value: 0 }), 'newjob.budget.help'),
            field('newjob-rate', 'newjob.rate', h('input', { name: 'rate_per_sec', type: 'number', min: 0, step: 'any', value: 0 }), 'newjob.rate.help')),
          h('div', { class: 'actions' }, h('button', { type: 'submit', class: 'primary', id: 'newjob-submit' }, t('newjob.submit'))), msg);
        // readSelected parses the chosen file (also at Send, should the
        // browser not have fired "change" for a file chosen again).
        const readSelected = async () => {
          parsed = null;
          preview.replaceChildren();
          const f = file.files && file.files[0];
          if (!f) return;
          if (f.size > cfg.csvMaxBytes) {
            setText(msg, t('csv.tooBig', { size: num(Math.ceil(f.size / 1024)), max: num(cfg.csvMaxBytes / 1024) }));
            return;
          }
          const res = recipientsFromCSV(await readFile(f));
          if (res.error) { setText(msg, res.error); return; }
          parsed = res.recipients;
          const accounts = new Set(parsed.map((r) => r.account));
          setText(msg, '');
          preview.replaceChildren(h('p', { id: 'newjob-count' }, t('newjob.parsed', { n: num(parsed.length), accounts: num(accounts.size) })),
            h('table', { class: 'small' }, h('thead', {}, h('tr', {}, ['supp.account', 'supp.to', 'newjob.vars'].map((k) => h('th', { scope: 'col' }, t(k))))),
              h('tbody', {}, parsed.slice(0, 5).map((r) => h('tr', {}, h('td', {}, r.account), h('td', {}, r.to), h('td', { class: 'mono' }, JSON.stringify(r.vars || {})))))));
        };
        file.addEventListener('change', () => { readSelected().catch((ex) => setText(msg, String(ex))); });
        form.addEventListener('submit', async (e) => {
          e.preventDefault();
          if (!parsed && file.files && file.files[0]) await readSelected();
          if (!parsed || !parsed.length) { if (!msg.textContent) setText(msg, t('csv.choose')); return; }
          const body = { name: form.elements.name.value.trim(), template: form.elements.template.value, recipients: parsed,
            budget: Number(form.elements.budget.value || 0), rate_per_sec: Number(form.elements.rate_per_sec.value || 0) };
          setText(msg, t('newjob.sending'));
          try {
            // One key per upload: a double click or a retried request
            // makes one job.
            form.dataset.key = form.dataset.key || 'ui-' + Date.now().toString(36) + '-' + Math.random().toString(36).slice(2, 10);
            const j = await apiKeyed('POST', '/v1/jobs', body, form.dataset.key);
            announce(t('newjob.created'));
            location.hash = '#/jobs/' + enc(j.id);
          } catch (ex) { formError(form, msg, ex); delete form.dataset.key; }
        });
        main().replaceChildren(h('h1', {}, t('newjob.title')), h('p', { class: 'muted' }, t('newjob.help')), form);
      },
    };
  }

  async function apiKeyed(method, path, body, key) {
    const res = await fetch(base + path, {
      method, cache: 'no-store', credentials: 'omit', body: JSON.stringify(body),
      headers: { Authorization: 'Bearer ' + token(), Accept: 'application/json', 'Content-Type': 'application/json', 'Idempotency-Key': key },
    });
    const text = await res.text();
    let data = null;
    try { data = text ? JSON.parse(text) : null; } catch (e) { data = null; }
    if (!res.ok) throw new APIError(res.status, data || { detail: text.slice(0, 200) });
    return data;
  }

  // ---------------------------------------------------------------- start

  async function start() {
    try {
      const res = await fetch('i18n.json', { cache: 'no-cache' });
      dict = await res.json();
    } catch (e) {
      dict = { en: {}, zh: {} };
    }
    lang = pickLanguage();
    applyStaticI18n();
    document.getElementById('lang').addEventListener('change', (e) => {
      lang = e.target.value === 'zh' ? 'zh' : 'en';
      localStorage.setItem(langKey, lang);
      applyStaticI18n();
      announce(t('lang.changed'));
      if (current) { stopPolling(); show(current, true); }
    });
    document.getElementById('logout').addEventListener('click', () => { logout(''); announce(t('logout.done')); });
    window.addEventListener('hashchange', route);
    route();
  }

  start();
})();
