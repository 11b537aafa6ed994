// weir's web UI. Plain JavaScript, no dependencies: it reads the job from /api/v1/job and the
// history from /api/v1/metrics/history, then follows /api/v1/events (server-sent events). Every
// text from the job (names, splits, keys, errors) goes into the page as text, never as markup.
'use strict';

(function () {
  const SVG_NS = 'http://www.w3.org/2000/svg';
  const PALETTE = ['#3563e9', '#d8443c', '#2f9e5d', '#9a4fd0', '#e08a1e', '#1b9aaa', '#c2417e', '#6b7a2a',
    '#5b6b8c', '#b5651d'];
  const LEGEND_MAX = 8;

  const state = {
    job: null,
    nodes: [],          // job.nodes
    history: [],        // samples, oldest first
    capacity: 600,
    latest: null,       // the newest snapshot event
    seq: 0,
    layout: null,       // graph layout
  };

  // ---- DOM helpers ----

  const $ = (id) => document.getElementById(id);

  function el(tag, attrs, ...children) {
    const e = document.createElement(tag);
    setAttrs(e, attrs);
    append(e, children);
    return e;
  }

  function svg(tag, attrs, ...children) {
    const e = document.createElementNS(SVG_NS, tag);
    setAttrs(e, attrs);
    append(e, children);
    return e;
  }

  function setAttrs(e, attrs) {
    if (!attrs) return;
    for (const [k, v] of Object.entries(attrs)) {
      if (v === undefined || v === null || v === false) continue;
      if (k === 'text') e.textContent = String(v);
      else e.setAttribute(k, v === true ? 'true' : String(v));
    }
  }

  function append(e, children) {
    for (const c of children.flat()) {
      if (c === undefined || c === null || c === false) continue;
      e.appendChild(typeof c === 'string' || typeof c === 'number' ? document.createTextNode(String(c)) : c);
    }
  }

  function replace(parent, ...children) {
    parent.replaceChildren();
    append(parent, children);
  }

  function code(text) {
    return el('code', { text });
  }

  // ---- formatting ----

  function fmtInt(n) {
    if (n === null || n === undefined) return '–';
    return Math.round(n).toLocaleString('en-US');
  }

  function fmtCompact(n) {
    if (n === null || n === undefined || !isFinite(n)) return '–';
    const a = Math.abs(n);
    if (a >= 1e9) return (n / 1e9).toFixed(a >= 1e10 ? 0 : 1) + ' G';
    if (a >= 1e6) return (n / 1e6).toFixed(a >= 1e7 ? 0 : 1) + ' M';
    if (a >= 1e4) return (n / 1e3).toFixed(a >= 1e5 ? 0 : 1) + ' k';
    if (a >= 100 || Number.isInteger(n)) return String(Math.round(n));
    return n.toFixed(a >= 10 ? 1 : 2);
  }

  function fmtBytes(n) {
    if (n === null || n === undefined) return '–';
    const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
    let i = 0;
    let v = n;
    while (Math.abs(v) >= 1024 && i < units.length - 1) { v /= 1024; i++; }
    return (i === 0 ? String(Math.round(v)) : v.toFixed(Math.abs(v) >= 100 ? 0 : 1)) + ' ' + units[i];
  }

  function fmtDuration(ms) {
    if (ms === null || ms === undefined || !isFinite(ms)) return '–';
    const sign = ms < 0 ? '−' : '';
    let a = Math.abs(ms);
    if (a < 1000) return sign + Math.round(a) + ' ms';
    if (a < 60000) return sign + (a / 1000).toFixed(a < 10000 ? 1 : 0) + ' s';
    a = Math.round(a / 1000);
    const d = Math.floor(a / 86400), h = Math.floor(a % 86400 / 3600), m = Math.floor(a % 3600 / 60), s = a % 60;
    const two = (a, ua, b, ub) => sign + a + ' ' + ua + (b ? ' ' + b + ' ' + ub : '');
    if (d > 0) return two(d, 'd', h, 'h');
    if (h > 0) return two(h, 'h', m, 'min');
    return two(m, 'min', s, 's');
  }

  function pad(n, w) { return String(n).padStart(w || 2, '0'); }

  // Event time, UTC.
  function fmtEventTime(ms, withDate) {
    if (ms === null || ms === undefined) return '–';
    const d = new Date(ms);
    if (isNaN(d.getTime())) return String(ms);
    const time = pad(d.getUTCHours()) + ':' + pad(d.getUTCMinutes()) + ':' + pad(d.getUTCSeconds());
    if (withDate === false) return time;
    return d.getUTCFullYear() + '-' + pad(d.getUTCMonth() + 1) + '-' + pad(d.getUTCDate()) + ' ' + time;
  }

  function fmtPct(x) {
    if (x === null || x === undefined || !isFinite(x)) return '–';
    return (x * 100).toFixed(x < 0.1 && x > 0 ? 1 : 0) + ' %';
  }

  // ---- data access ----

  async function getJSON(path) {
    const r = await fetch(path, { headers: { Accept: 'application/json' }, cache: 'no-store' });
    if (!r.ok) throw new Error(path + ': ' + r.status);
    return r.json();
  }

  function nodeLabel(i) {
    const n = state.nodes[i];
    return n ? n.label : String(i);
  }

  function sourceNodes() {
    return state.nodes.filter((n) => n.role === 'source').map((n) => n.id);
  }

  function sinkNodes() {
    return state.nodes.filter((n) => n.role === 'sink').map((n) => n.id);
  }

  // ---- the graph ----

  const BOX_W = 196, BOX_H = 66, GAP_X = 56, GAP_Y = 20, PAD = 14;

  function layoutGraph(nodes) {
    const layer = [];
    for (const n of nodes) {
      layer[n.id] = n.upstream.length === 0 ? 0 : Math.max(...n.upstream.map((u) => (layer[u] || 0) + 1));
    }
    const layers = [];
    for (const n of nodes) (layers[layer[n.id]] = layers[layer[n.id]] || []).push(n.id);
    // Order each layer by where its inputs sit, to keep edges short and straight.
    const pos = [];
    layers.forEach((ids, li) => {
      if (li > 0) {
        const key = (id) => {
          const ups = nodes[id].upstream;
          return ups.length ? ups.reduce((a, u) => a + (pos[u] || 0), 0) / ups.length : 0;
        };
        ids.sort((a, b) => key(a) - key(b) || a - b);
      }
      ids.forEach((id, i) => { pos[id] = i; });
    });
    const tallest = Math.max(1, ...layers.map((l) => l.length));
    const height = PAD * 2 + tallest * BOX_H + (tallest - 1) * GAP_Y + 14;
    const width = PAD * 2 + layers.length * BOX_W + (layers.length - 1) * GAP_X;
    const xy = [];
    layers.forEach((ids, li) => {
      const span = ids.length * BOX_H + (ids.length - 1) * GAP_Y;
      const top = PAD + 14 + ((tallest * BOX_H + (tallest - 1) * GAP_Y) - span) / 2;
      ids.forEach((id, i) => { xy[id] = { x: PAD + li * (BOX_W + GAP_X), y: top + i * (BOX_H + GAP_Y) }; });
    });
    return { xy, width, height };
  }

  function edgeLabel(p) {
    if (!p) return '';
    if (typeof p === 'string') return p === 'forward' ? '' : p;
    if (p.hash) return 'hash(' + p.hash.keys.join(', ') + ')';
    if (p.salted) return 'salted(' + p.salted.keys.join(', ') + ')';
    return Object.keys(p)[0] || '';
  }

  function truncate(s, n) {
    return s.length > n ? s.slice(0, n - 1) + '…' : s;
  }

  function buildGraph() {
    const host = $('graph');
    const nodes = state.nodes;
    if (!nodes.length) { replace(host, el('p', { class: 'muted', text: 'The job has no nodes.' })); return; }
    const lay = layoutGraph(nodes);
    state.layout = lay;
    const root = svg('svg', {
      viewBox: '0 0 ' + lay.width + ' ' + lay.height,
      preserveAspectRatio: 'xMinYMin meet',
      'data-testid': 'graph-svg',
    });
    // Never drawn larger than life; scaled down to fit a wide graph.
    root.style.maxWidth = lay.width + 'px';
    root.appendChild(svg('defs', null,
      svg('marker', { id: 'arrow', viewBox: '0 0 10 10', refX: 9, refY: 5, markerWidth: 7, markerHeight: 7, orient: 'auto-start-reverse' },
        svg('path', { d: 'M 0 0 L 10 5 L 0 10 z', class: 'arrow' }))));
    const edges = (state.job.graph && state.job.graph.edges) || [];
    const edgeGroup = svg('g', { class: 'edges' });
    for (const e of edges) {
      const a = lay.xy[e.from], b = lay.xy[e.to];
      if (!a || !b) continue;
      const x1 = a.x + BOX_W, y1 = a.y + BOX_H / 2, x2 = b.x - 2, y2 = b.y + BOX_H / 2;
      const mx = (x1 + x2) / 2;
      const late = e.port && typeof e.port === 'object';
      // An operator chained into the node before it runs in that node's subtasks.
      const to = nodes.find((n) => n.id === e.to);
      const chained = to && to.chained_into !== undefined && to.chained_into !== null;
      edgeGroup.appendChild(svg('path', {
        class: 'edge' + (late ? ' late' : '') + (chained ? ' chained' : ''),
        d: 'M ' + x1 + ' ' + y1 + ' C ' + mx + ' ' + y1 + ', ' + mx + ' ' + y2 + ', ' + x2 + ' ' + y2,
        'marker-end': 'url(#arrow)',
        'data-from': nodeLabel(e.from),
        'data-to': nodeLabel(e.to),
      }));
      const label = (late ? 'late · ' : '') + (chained ? 'chained' : edgeLabel(e.partitioning));
      if (label) {
        edgeGroup.appendChild(svg('text', {
          class: 'edge-label', x: mx, y: (y1 + y2) / 2 - 4, 'text-anchor': 'middle', text: truncate(label, 26),
        }));
      }
    }
    root.appendChild(edgeGroup);
    for (const n of nodes) {
      const p = lay.xy[n.id];
      const g = svg('g', {
        class: 'node',
        transform: 'translate(' + p.x + ',' + p.y + ')',
        'data-operator': n.label,
        'data-node-id': n.id,
        'data-role': n.role,
        'data-bottleneck': 'false',
        'data-state': 'idle',
        'data-testid': 'operator-' + n.id,
      });
      g.appendChild(svg('title', { text: n.label }));
      g.appendChild(svg('rect', { class: 'box', width: BOX_W, height: BOX_H, rx: 5, fill: '#ffffff' }));
      g.appendChild(svg('text', { class: 'name', x: 8, y: 16, text: truncate(n.label, 24) }));
      g.appendChild(svg('text', { class: 'kind', x: 8, y: 30, text: truncate(n.role + ' · ' + n.kind + ' ×' + n.parallelism, 28) }));
      g.appendChild(svg('rect', { class: 'bar-bg', x: 8, y: 38, width: BOX_W - 16, height: 7, rx: 1 }));
      g.appendChild(svg('rect', { class: 'bar-busy', x: 8, y: 38, width: 0, height: 7 }));
      g.appendChild(svg('rect', { class: 'bar-backpressured', x: 8, y: 38, width: 0, height: 7 }));
      g.appendChild(svg('rect', { class: 'bar-idle', x: 8, y: 38, width: 0, height: 7 }));
      g.appendChild(svg('text', { class: 'figures', x: 8, y: 59, text: '–' }));
      const badge = svg('g', { class: 'badge', transform: 'translate(' + (BOX_W - 86) + ',-9)', visibility: 'hidden' },
        svg('rect', { width: 86, height: 16, rx: 8 }),
        svg('text', { x: 43, y: 12, 'text-anchor': 'middle', text: 'BOTTLENECK' }));
      g.appendChild(badge);
      root.appendChild(g);
    }
    replace(host, root);
  }

  // Fill of a node: white to red with busy time, white to amber with backpressured time.
  function nodeFill(busy, bp) {
    const mix = (c, t) => {
      const r = Math.round(255 + (c[0] - 255) * t), g = Math.round(255 + (c[1] - 255) * t), b = Math.round(255 + (c[2] - 255) * t);
      return 'rgb(' + r + ',' + g + ',' + b + ')';
    };
    if (busy >= bp) return mix([216, 68, 60], Math.min(1, busy) * 0.55);
    return mix([233, 162, 59], Math.min(1, bp) * 0.55);
  }

  function updateGraph(ev) {
    const m = ev.metrics;
    const bottleneck = ev.bottleneck ? ev.bottleneck.node : -1;
    const groups = document.querySelectorAll('#graph g.node');
    for (const g of groups) {
      const id = Number(g.getAttribute('data-node-id'));
      const n = m.nodes[id];
      const s = ev.sample && ev.sample.nodes[id];
      if (!n || !s) continue;
      const busy = s.busy_ms_per_sec / 1000, bp = s.backpressured_ms_per_sec / 1000, idle = s.idle_ms_per_sec / 1000;
      const w = BOX_W - 16;
      const bw = Math.max(0, Math.min(1, busy)) * w;
      const pw = Math.max(0, Math.min(1 - busy, bp)) * w;
      const iw = Math.max(0, Math.min(1 - busy - bp, idle)) * w;
      g.querySelector('.bar-busy').setAttribute('width', bw.toFixed(1));
      const pbar = g.querySelector('.bar-backpressured');
      pbar.setAttribute('x', (8 + bw).toFixed(1));
      pbar.setAttribute('width', pw.toFixed(1));
      const ibar = g.querySelector('.bar-idle');
      ibar.setAttribute('x', (8 + bw + pw).toFixed(1));
      ibar.setAttribute('width', iw.toFixed(1));
      g.querySelector('rect.box').setAttribute('fill', nodeFill(busy, bp));
      const stateName = busy >= 0.5 && busy >= bp ? 'busy' : bp >= 0.5 ? 'backpressured' : 'idle';
      g.setAttribute('data-state', stateName);
      g.setAttribute('data-busy', Math.round(s.busy_ms_per_sec));
      g.setAttribute('data-backpressured', Math.round(s.backpressured_ms_per_sec));
      g.setAttribute('data-idle', Math.round(s.idle_ms_per_sec));
      const isB = id === bottleneck;
      g.setAttribute('data-bottleneck', isB ? 'true' : 'false');
      g.querySelector('.badge').setAttribute('visibility', isB ? 'visible' : 'hidden');
      const pct = (x) => Math.round(Math.max(0, Math.min(1, x)) * 100) + '%';
      g.querySelector('text.figures').textContent =
        'busy ' + pct(busy) + ' · backpr. ' + pct(bp) + ' · ' + fmtCompact(n.rows_out).replace(' ', '') + ' out';
      g.querySelector('title').textContent = n.name + ' (' + n.kind + ')\n' +
        'busy ' + Math.round(s.busy_ms_per_sec) + ' ms/s, backpressured ' + Math.round(s.backpressured_ms_per_sec) +
        ' ms/s, idle ' + Math.round(s.idle_ms_per_sec) + ' ms/s (busiest subtask)\n' +
        'rows in ' + fmtInt(n.rows_in) + ', out ' + fmtInt(n.rows_out) +
        (n.state_bytes ? '\nstate ' + fmtInt(n.state_rows) + ' rows, ' + fmtBytes(n.state_bytes) : '') +
        (state.nodes[id] ? '\ncreated at ' + state.nodes[id].created_at : '');
    }
    const b = $('bottleneck');
    if (ev.bottleneck) {
      const id = ev.bottleneck.node;
      const s = ev.sample.nodes[id];
      const feeders = (state.nodes[id] ? state.nodes[id].upstream : [])
        .filter((u) => ev.sample.nodes[u] && ev.sample.nodes[u].backpressured_ms_per_sec > 500)
        .map((u) => nodeLabel(u));
      b.setAttribute('data-operator', ev.bottleneck.operator);
      replace(b, 'Bottleneck: ', el('strong', { text: ev.bottleneck.operator }),
        ' — busy ' + Math.round(s.busy_ms_per_sec) + ' ms/s while ' +
        (feeders.length ? feeders.join(', ') : 'its input') + ' ' + (feeders.length > 1 ? 'are' : 'is') +
        ' backpressured.',
        el('span', { class: 'rule', 'data-testid': 'bottleneck-rule', text: 'Found by the rule: ' + state.job.bottleneck_rule + '.' }));
    } else {
      b.setAttribute('data-operator', '');
      replace(b, 'No bottleneck: no busy operator is fed by a backpressured one.',
        el('span', { class: 'rule', 'data-testid': 'bottleneck-rule', text: 'The rule: ' + (state.job ? state.job.bottleneck_rule : '') + '.' }));
    }
  }

  // ---- charts ----

  function niceStep(range, ticks) {
    const raw = range / Math.max(1, ticks);
    const mag = Math.pow(10, Math.floor(Math.log10(raw)));
    const f = raw / mag;
    return (f <= 1 ? 1 : f <= 2 ? 2 : f <= 5 ? 5 : 10) * mag;
  }

  const TIME_STEPS = [1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 21600, 43200, 86400].map((s) => s * 1000);

  // opts: { series: [{ name, points: [[t, v|null]] }], yFormat, threshold: { value, label }, empty, yMinZero }
  function lineChart(figureId, opts) {
    const fig = $(figureId);
    const host = fig.querySelector('.chart');
    const width = Math.max(240, Math.round(host.clientWidth || 380));
    const height = 150;
    const m = { l: 58, r: 10, t: 8, b: 20 };
    const root = svg('svg', { viewBox: '0 0 ' + width + ' ' + height, preserveAspectRatio: 'none', 'data-testid': figureId + '-svg' });
    const series = opts.series.filter((s) => s.points.some((p) => p[1] !== null && p[1] !== undefined));
    const legend = el('ul', { class: 'chart-legend' });
    if (!series.length) {
      root.appendChild(svg('text', { class: 'empty', x: width / 2, y: height / 2, 'text-anchor': 'middle', text: opts.empty || 'No data yet' }));
      replace(host, root, legend);
      fig.setAttribute('data-series', '0');
      return;
    }
    let t0 = Infinity, t1 = -Infinity, y0 = Infinity, y1 = -Infinity;
    for (const s of series) {
      for (const [t, v] of s.points) {
        t0 = Math.min(t0, t); t1 = Math.max(t1, t);
        if (v !== null && v !== undefined) { y0 = Math.min(y0, v); y1 = Math.max(y1, v); }
      }
    }
    if (opts.threshold) { y1 = Math.max(y1, opts.threshold.value); y0 = Math.min(y0, opts.threshold.value); }
    if (opts.yMinZero) y0 = Math.min(0, y0);
    if (t1 - t0 < 60000) t0 = t1 - 60000;
    if (y1 === y0) { y1 += Math.abs(y1) * 0.1 || 1; y0 -= opts.yMinZero ? 0 : (Math.abs(y0) * 0.1 || 1); if (opts.yMinZero) y0 = Math.min(0, y0); }
    const step = opts.yStep ? opts.yStep(y1 - y0) : niceStep(y1 - y0, 4);
    y0 = Math.floor(y0 / step) * step;
    y1 = Math.ceil(y1 / step) * step;
    const X = (t) => m.l + (t - t0) / (t1 - t0) * (width - m.l - m.r);
    const Y = (v) => height - m.b - (v - y0) / (y1 - y0) * (height - m.t - m.b);
    for (let v = y0; v <= y1 + step / 2; v += step) {
      root.appendChild(svg('line', { class: 'grid', x1: m.l, x2: width - m.r, y1: Y(v), y2: Y(v) }));
      root.appendChild(svg('text', { class: 'tick', x: m.l - 4, y: Y(v) + 3, 'text-anchor': 'end', text: opts.yFormat(v) }));
    }
    const span = t1 - t0;
    const tstep = TIME_STEPS.find((s) => span / s <= 5) || 86400000;
    for (let k = 0; k * tstep <= span; k++) {
      const t = t1 - k * tstep;
      const x = X(t);
      if (x < m.l) break;
      root.appendChild(svg('text', {
        class: 'tick', x, y: height - 6, 'text-anchor': k === 0 ? 'end' : 'middle',
        text: k === 0 ? 'now' : '−' + fmtDuration(k * tstep),
      }));
    }
    root.appendChild(svg('line', { class: 'axis', x1: m.l, x2: m.l, y1: m.t, y2: height - m.b }));
    root.appendChild(svg('line', { class: 'axis', x1: m.l, x2: width - m.r, y1: height - m.b, y2: height - m.b }));
    if (opts.threshold) {
      const y = Y(opts.threshold.value);
      root.appendChild(svg('line', { class: 'threshold', x1: m.l, x2: width - m.r, y1: y, y2: y, 'data-testid': figureId + '-threshold' }));
      root.appendChild(svg('text', { class: 'threshold-label', x: width - m.r - 2, y: y - 3, 'text-anchor': 'end', text: opts.threshold.label }));
    }
    series.forEach((s, i) => {
      const color = PALETTE[i % PALETTE.length];
      let d = '';
      let pen = false;
      for (const [t, v] of s.points) {
        if (v === null || v === undefined) { pen = false; continue; }
        d += (pen ? ' L ' : ' M ') + X(t).toFixed(1) + ' ' + Y(v).toFixed(1);
        pen = true;
      }
      root.appendChild(svg('path', { class: 'line', d: d.trim(), stroke: color, 'data-series': s.name },
        svg('title', { text: s.name })));
      if (i < LEGEND_MAX) {
        const last = [...s.points].reverse().find((p) => p[1] !== null && p[1] !== undefined);
        const swatch = el('span', { class: 'swatch' });
        swatch.style.background = color;
        legend.appendChild(el('li', { 'data-series': s.name }, swatch, s.name + (last ? ': ' + opts.yFormat(last[1]) : '')));
      }
    });
    if (series.length > LEGEND_MAX) legend.appendChild(el('li', { class: 'muted', text: '+' + (series.length - LEGEND_MAX) + ' more' }));
    fig.setAttribute('data-series', String(series.length));
    replace(host, root, legend);
  }

  function renderCharts() {
    const h = state.history;
    const splitKeys = new Map();
    for (const s of h) {
      for (const sp of s.splits) {
        const k = sp.node + '\u0000' + sp.split;
        if (!splitKeys.has(k)) splitKeys.set(k, nodeLabel(sp.node) + ' / ' + sp.split);
      }
    }
    const splitSeries = (field, scale) => [...splitKeys.entries()].map(([k, name]) => ({
      name,
      points: h.map((s) => {
        const sp = s.splits.find((x) => x.node + '\u0000' + x.split === k);
        const v = sp ? sp[field] : null;
        return [s.at, v === null || v === undefined ? null : v / (scale || 1)];
      }),
    }));
    const wms = splitSeries('watermark');
    let wmRange = 0;
    for (const s of wms) for (const p of s.points) if (p[1] !== null) wmRange = Math.max(wmRange, p[1]);
    lineChart('chart-watermarks', {
      series: wms,
      yFormat: (v) => fmtEventTime(v, false),
      yStep: (r) => TIME_STEPS.find((s) => r / s <= 4) || niceStep(r, 4),
      empty: 'No watermark yet',
    });
    const multi = state.nodes.filter((n) => n.upstream.length >= 2).map((n) => n.id);
    const thresholdMs = state.job ? state.job.spread_alert_ms : null;
    lineChart('chart-spread', {
      series: multi.map((id) => ({
        name: nodeLabel(id),
        points: h.map((s) => [s.at, s.nodes[id] && s.nodes[id].event_time_spread_ms !== undefined ? s.nodes[id].event_time_spread_ms : null]),
      })),
      yFormat: fmtDuration,
      yStep: (r) => TIME_STEPS.find((s) => r / s <= 4) || niceStep(r, 4),
      yMinZero: true,
      threshold: multi.length && thresholdMs !== null ? { value: thresholdMs, label: 'alert above ' + fmtDuration(thresholdMs) } : null,
      empty: multi.length ? 'Not every input has rows yet' : 'No operator with several inputs',
    });
    lineChart('chart-lag', {
      series: splitSeries('time_lag_ms'),
      yFormat: fmtDuration,
      yStep: (r) => TIME_STEPS.find((s) => r / s <= 4) || niceStep(r, 4),
      yMinZero: true,
      empty: 'No rows read yet',
    });
    const stateful = state.nodes.filter((n) => h.some((s) => s.nodes[n.id] && s.nodes[n.id].state_bytes > 0)).map((n) => n.id);
    lineChart('chart-state', {
      series: stateful.map((id) => ({ name: nodeLabel(id), points: h.map((s) => [s.at, s.nodes[id] ? s.nodes[id].state_bytes : null]) })),
      yFormat: fmtBytes,
      yStep: (r) => { const p = Math.pow(1024, Math.max(0, Math.floor(Math.log(Math.max(r, 1)) / Math.log(1024)))); return niceStep(r / p, 4) * p; },
      yMinZero: true,
      empty: 'No operator keeps state',
    });
    lineChart('chart-late', {
      series: [
        { name: 'late rows', points: h.map((s) => [s.at, s.late_rows]) },
        { name: 'dead letters', points: h.map((s) => [s.at, s.dead_letters]) },
      ],
      yFormat: fmtCompact,
      yMinZero: true,
    });
    lineChart('chart-busy', {
      series: state.nodes.map((n) => ({ name: n.label, points: h.map((s) => [s.at, s.nodes[n.id] ? s.nodes[n.id].busy_ms_per_sec / 10 : null]) })),
      yFormat: (v) => Math.round(v) + ' %',
      yStep: () => 25,
      yMinZero: true,
    });
  }

  // ---- tables and panels ----

  function rates() {
    const h = state.history;
    if (h.length < 2) return null;
    const a = h[h.length - 2], b = h[h.length - 1];
    const dt = (b.at - a.at) / 1000;
    if (dt <= 0) return null;
    const sum = (s, ids, f) => ids.reduce((acc, id) => acc + (s.nodes[id] ? s.nodes[id][f] : 0), 0);
    const perNode = state.nodes.map((n) => (b.nodes[n.id] && a.nodes[n.id] ? Math.max(0, b.nodes[n.id].rows_in - a.nodes[n.id].rows_in) / dt : null));
    return {
      in: Math.max(0, sum(b, sourceNodes(), 'rows_out') - sum(a, sourceNodes(), 'rows_out')) / dt,
      out: Math.max(0, sum(b, sinkNodes(), 'rows_in') - sum(a, sinkNodes(), 'rows_in')) / dt,
      perNode,
    };
  }

  function renderHeader(ev) {
    const m = ev.metrics;
    const r = rates();
    $('uptime').textContent = state.job ? fmtDuration(m.at - state.job.started_at) : '–';
    $('rate-in').textContent = r ? fmtCompact(r.in) : '–';
    $('rate-out').textContent = r ? fmtCompact(r.out) : '–';
    $('in-flight').textContent = fmtCompact(m.in_flight_rows) + ' / ' + fmtCompact(m.in_flight_bound_rows);
    $('updated').textContent = 'sampled ' + new Date(m.at).toLocaleTimeString();
  }

  // A backfill's progress through its event-time range (weir backfill only).
  function renderRange(ev) {
    const r = ev.range;
    const box = $('backfill');
    box.hidden = !r;
    if (!r) return;
    box.setAttribute('data-caught-up', r.caught_up ? 'true' : 'false');
    $('backfill-done').style.width = (Math.max(0, Math.min(1, r.done)) * 100).toFixed(1) + '%';
    const reached = r.watermark === null ? 'no watermark yet'
      : r.watermark >= 9223372036854775000 ? 'every input read' : 'at ' + fmtEventTime(r.watermark);
    const left = r.caught_up ? 'caught up'
      : r.time_left_ms === null ? 'time left unknown' : 'about ' + fmtDuration(r.time_left_ms) + ' left';
    $('backfill-text').textContent = 'Backfill ' + fmtEventTime(r.from_ms) + ' .. '
      + (r.until_ms === null ? 'now' : fmtEventTime(r.until_ms)) + ': ' + fmtPct(r.done) + ' done, '
      + reached + ', ' + fmtCompact(r.rows_per_s) + ' rows/s, ' + left;
  }

  function shares(busy, bp, idle) {
    const bar = el('span', { class: 'shares' });
    for (const [cls, v] of [['busy', busy], ['backpressured', bp], ['idle', idle]]) {
      const s = el('span', { class: cls });
      s.style.width = Math.max(0, Math.min(100, v / 10)).toFixed(1) + '%';
      bar.appendChild(s);
    }
    return bar;
  }

  function renderOperators(ev) {
    const m = ev.metrics;
    const r = rates();
    const body = $('operators').tBodies[0];
    const rows = m.nodes.map((n, id) => {
      const s = ev.sample.nodes[id];
      const info = state.nodes[id] || { label: n.name, parallelism: n.subtasks.length };
      return el('tr', {
        'data-operator': info.label, 'data-node-id': id,
        'data-bottleneck': ev.bottleneck && ev.bottleneck.node === id ? 'true' : 'false',
      },
      el('td', { title: info.created_at || '' }, info.label, el('div', { class: 'sub', text: n.kind + ' ×' + n.subtasks.length })),
      el('td', { class: 'num', text: fmtInt(n.rows_in) }),
      el('td', { class: 'num', text: fmtInt(n.rows_out) }),
      el('td', { class: 'num', text: r && r.perNode[id] !== null ? fmtCompact(r.perNode[id]) : '–' }),
      el('td', null, shares(s.busy_ms_per_sec, s.backpressured_ms_per_sec, s.idle_ms_per_sec),
        Math.round(s.busy_ms_per_sec) + ' · ' + Math.round(s.backpressured_ms_per_sec) + ' · ' + Math.round(s.idle_ms_per_sec)),
      el('td', { class: 'num', 'data-on-disk': n.state_on_disk ? 'true' : 'false' },
        n.state_rows || n.peak_state_rows ? fmtBytes(n.state_bytes) + (n.state_on_disk ? ' on disk' : '') : '–',
        n.state_rows || n.peak_state_rows ? el('div', { class: 'sub', text: fmtInt(n.state_rows) + ' rows, peak ' + fmtBytes(n.peak_state_bytes) }) : null),
      el('td', { class: 'num', text: fmtInt(n.late_rows) }),
      el('td', { class: 'num', text: n.load_max_over_avg.toFixed(2) }));
    });
    replace(body, rows);
  }

  function renderSplits(ev) {
    const body = $('splits').tBodies[0];
    const splits = ev.sources.splits;
    if (!splits.length) {
      replace(body, el('tr', { 'data-empty': 'true' }, el('td', { colspan: 6, class: 'muted', text: 'No source split yet' })));
      return;
    }
    replace(body, splits.map((sp) => {
      const tags = [];
      if (sp.paused) tags.push(el('span', { class: 'tag paused', title: 'ahead of its alignment group by ' + fmtDuration(sp.drift_ms) + ' (allowed ' + fmtDuration(sp.max_drift_ms) + ')', text: 'paused by alignment' }));
      if (sp.idle) tags.push(el('span', { class: 'tag idle', text: 'idle' }));
      if (sp.finished) tags.push(el('span', { class: 'tag finished', text: 'finished' }));
      if (!tags.length) tags.push(el('span', { class: 'tag active', text: 'reading' }));
      const progress = sp.progress_total > 0 ? fmtPct(sp.progress_done / sp.progress_total) + ' read' : null;
      return el('tr', {
        'data-source': sp.source, 'data-split': sp.split,
        'data-paused': sp.paused ? 'true' : 'false',
        'data-idle': sp.idle ? 'true' : 'false',
        'data-finished': sp.finished ? 'true' : 'false',
      },
      el('td', null, sp.split, el('div', { class: 'sub', text: sp.source + (sp.alignment_group ? ' · group ' + sp.alignment_group : '') })),
      el('td', { title: sp.watermark === null ? '' : 'delay ' + fmtDuration(sp.watermark_delay_ms) }, fmtEventTime(sp.watermark),
        sp.drift_ms !== null ? el('div', { class: 'sub', text: 'drift ' + fmtDuration(sp.drift_ms) }) : null),
      el('td', { class: 'num', text: fmtDuration(sp.time_lag_ms) }),
      el('td', { class: 'num', text: sp.consumer_lag_records === null ? '–' : fmtInt(sp.consumer_lag_records) }),
      el('td', { class: 'num' }, fmtInt(sp.rows_read),
        el('div', { class: 'sub', text: [progress, sp.late_rows ? fmtInt(sp.late_rows) + ' late' : null, sp.dead_letters ? fmtInt(sp.dead_letters) + ' dead' : null].filter(Boolean).join(' · ') })),
      el('td', null, tags));
    }));
  }

  function renderHotKeys(ev) {
    const host = $('hot-keys');
    const ex = ev.metrics.hot_keys || [];
    if (!ex.length) {
      replace(host, el('p', { class: 'muted', 'data-empty': 'true', text: 'No keyed operator in this job.' }));
      return;
    }
    const keyed = new Map(state.nodes.filter((n) => n.keys).map((n) => [n.name, n]));
    replace(host, ex.map((x) => {
      const to = keyed.get(x.to);
      return el('div', { class: 'exchange', 'data-from': x.from, 'data-to': x.to, 'data-operator': to ? to.label : x.to },
        el('h3', null, x.to, el('small', { text: ' from ' + x.from + (to && to.keys ? ', keyed by ' + to.keys.join(', ') : '') })),
        x.top.length ? el('ol', null, x.top.map((k) => {
          const meter = el('span');
          meter.style.width = Math.max(0.5, Math.min(100, k.share * 100)).toFixed(1) + '%';
          return el('li', { 'data-key': k.key, 'data-hot': k.share >= 0.2 ? 'true' : 'false', title: '≈ ' + fmtInt(k.rows) + ' rows' },
            el('span', { class: 'key', text: k.key === '' ? '(empty)' : k.key }),
            el('span', { class: 'meter' }, meter),
            el('span', { class: 'share', text: fmtPct(k.share) }));
        })) : el('p', { class: 'muted', text: 'No rows yet.' }));
    }));
  }

  function renderCheckpoints(ev) {
    const c = ev.checkpoints;
    const host = $('checkpoints');
    host.setAttribute('data-enabled', c.enabled ? 'true' : 'false');
    const parts = [];
    if (!c.enabled) {
      parts.push(el('p', { class: 'muted', id: 'checkpoint-summary', text: 'This job takes no checkpoints: a failure starts it over, and there are no savepoints. Run it with checkpoints to have both.' }));
    } else {
      const fig = (label, value, id) => el('div', null, el('dt', { text: label }), el('dd', { id, text: value }));
      parts.push(el('dl', { id: 'checkpoint-summary' },
        fig('completed', fmtInt(c.completed), 'checkpoint-completed'),
        fig('last', c.last_id ? '#' + c.last_id : 'none yet', 'checkpoint-last'),
        fig('every', fmtDuration(c.interval_ms), 'checkpoint-interval'),
        fig('last took', c.last_id ? fmtDuration(c.last_duration_ms) : '–', 'checkpoint-duration'),
        fig('longest', c.last_id ? fmtDuration(c.max_duration_ms) : '–', 'checkpoint-max'),
        fig('held up', c.last_id ? fmtDuration(c.last_sync_ms) + ' (writing ' + fmtDuration(c.last_async_ms) + ')' : '–', 'checkpoint-sync'),
        fig('alignment', c.last_id ? fmtDuration(c.last_alignment_ms) : '–', 'checkpoint-alignment'),
        fig('size', c.last_id ? fmtBytes(c.last_bytes) : '–', 'checkpoint-size')));
      const ops = c.operators || [];
      if (ops.length) {
        const num = (text) => el('td', { class: 'num', text });
        parts.push(el('h3', { text: 'Each operator\'s part in the last checkpoint it took part in (the longest of its subtasks)' }));
        parts.push(el('div', { class: 'scroll' }, el('table', { id: 'checkpoint-operators' },
          el('thead', null, el('tr', null, ['operator', 'checkpoint', 'held up', 'writing', 'aligning', 'size', 'written', 'longest held up'].map((t) => el('th', { text: t })))),
          el('tbody', null, ops.map((o) => el('tr', { 'data-operator': o.operator, 'data-bytes': o.last_bytes, 'data-checkpoint': o.last_id },
            el('td', null, code(o.operator)),
            el('td', { class: 'num', text: '#' + o.last_id + (o.last_id === c.last_id ? '' : ' (ended since)') }),
            num(fmtDuration(o.last_sync_ms)), num(fmtDuration(o.last_async_ms)), num(fmtDuration(o.last_alignment_ms)),
            num(fmtBytes(o.last_bytes)), num(fmtBytes(o.last_written_bytes)), num(fmtDuration(o.max_sync_ms))))))));
      }
      const recent = c.recent.slice(-40);
      if (recent.length) {
        const w = 400, hgt = 60, bw = w / 40;
        const max = Math.max(1, ...recent.map((r) => r.duration_ms));
        const bars = svg('svg', { viewBox: '0 0 ' + w + ' ' + hgt, preserveAspectRatio: 'none' },
          recent.map((r, i) => svg('rect', {
            x: (i * bw + 1).toFixed(1), width: (bw - 2).toFixed(1),
            y: (hgt - r.duration_ms / max * (hgt - 4)).toFixed(1), height: (r.duration_ms / max * (hgt - 4)).toFixed(1),
            'data-checkpoint': r.id,
          }, svg('title', { text: '#' + r.id + ': ' + fmtDuration(r.duration_ms) + ', ' + fmtBytes(r.bytes) }))));
        parts.push(el('h3', { text: 'Durations of the recent checkpoints (longest ' + fmtDuration(max) + ')' }), el('div', { id: 'checkpoint-bars' }, bars));
        parts.push(el('div', { class: 'scroll' }, el('table', { id: 'checkpoint-list' },
          el('thead', null, el('tr', null, el('th', { text: 'checkpoint' }), el('th', { text: 'seen complete' }), el('th', { text: 'took' }), el('th', { text: 'size' }))),
          el('tbody', null, recent.slice().reverse().slice(0, 10).map((r) => el('tr', { 'data-checkpoint': r.id },
            el('td', { text: '#' + r.id }), el('td', { text: new Date(r.seen_at).toLocaleTimeString() }),
            el('td', { class: 'num', text: fmtDuration(r.duration_ms) }), el('td', { class: 'num', text: fmtBytes(r.bytes) })))))));
      }
    }
    if (c.savepoints.length) {
      parts.push(el('h3', { text: 'Savepoints asked for here' }));
      parts.push(el('ul', { id: 'savepoint-list' }, c.savepoints.slice().reverse().map((s) => el('li', {
        'data-savepoint': s.id, 'data-done': s.completed_at ? 'true' : 'false', 'data-failed': s.error ? 'true' : 'false',
      }, new Date(s.requested_at).toLocaleTimeString() + (s.then_stop ? ' (then stop): ' : ': '),
      s.path ? code(s.path) : s.error ? el('span', { class: 'muted', text: s.error }) : 'in progress…'))));
    }
    replace(host, parts);
  }

  function renderAlerts(ev) {
    const list = [];
    const add = (kind, level, ...content) => list.push(el('div', { class: 'alert', 'data-alert': kind, 'data-level': level }, content));
    const st = ev.status;
    if (st.state === 'failed') add('failed', 'error', 'The job failed: ' + st.error);
    if (st.state === 'restarting') add('restarting', 'warn', 'The job failed and goes on from its newest checkpoint (restart ' + st.restarts + '): ' + st.error);
    for (const inp of ev.sources.inputs) {
      if (inp.alert) {
        const a = list.length;
        add('spread', 'warn', 'The inputs of ', code(inp.operator), ' are ' + fmtDuration(inp.spread_ms) +
          ' apart in event time (alert above ' + fmtDuration(inp.alert_threshold_ms) +
          '): one input is replaying or stalled, and the operator\'s state grows with the gap.');
        list[a].setAttribute('data-operator', inp.operator);
      }
    }
    if (ev.bottleneck) {
      const a = list.length;
      add('bottleneck', 'info', 'Bottleneck: ', code(ev.bottleneck.operator), ' is busy while what feeds it waits for it.');
      list[a].setAttribute('data-operator', ev.bottleneck.operator);
    }
    for (const x of ev.metrics.hot_keys || []) {
      const k = x.top[0];
      if (k && k.share >= 0.2) {
        add('hot-key', 'warn', 'Hot key ', code(k.key), ' is ' + fmtPct(k.share) + ' of the rows from ', code(x.from), ' to ', code(x.to), '.');
      }
    }
    const dead = ev.sources.splits.reduce((a, s) => a + s.dead_letters, 0);
    const read = ev.sources.splits.reduce((a, s) => a + s.rows_read, 0);
    if (dead > 0) add('dead-letters', 'warn', fmtInt(dead) + ' records went to the dead letters (' + fmtPct(dead / Math.max(1, read + dead)) + ' of those read).');
    const paused = ev.sources.splits.filter((s) => s.paused);
    if (paused.length) add('alignment', 'info', paused.length + ' split' + (paused.length > 1 ? 's' : '') + ' paused by watermark alignment: ' + paused.map((s) => s.source + ' / ' + s.split).join(', ') + '.');
    if (!list.length) add('none', 'ok', 'No alerts.');
    replace($('alerts'), list);
  }

  function renderStatus(status) {
    const s = $('job-status');
    s.setAttribute('data-state', status.state);
    s.textContent = status.state;
    s.title = status.error || '';
    const ended = ['finished', 'stopped', 'failed'].includes(status.state);
    const actions = state.job ? state.job.actions : { savepoint: false, stop: false };
    $('savepoint').disabled = ended || !actions.savepoint;
    $('savepoint-stop').disabled = ended || !actions.savepoint;
    $('stop').disabled = ended || !actions.stop;
  }

  // ---- events ----

  function onSnapshot(ev) {
    if (ev.seq < state.seq) return;
    state.seq = ev.seq;
    state.latest = ev;
    const last = state.history[state.history.length - 1];
    if (ev.sample && (!last || ev.sample.at > last.at)) {
      state.history.push(ev.sample);
      while (state.history.length > state.capacity) state.history.shift();
    }
    renderStatus(ev.status);
    renderHeader(ev);
    renderRange(ev);
    updateGraph(ev);
    renderAlerts(ev);
    renderSplits(ev);
    renderOperators(ev);
    renderHotKeys(ev);
    renderCheckpoints(ev);
    renderCharts();
  }

  async function onStatus(ev) {
    if (ev.seq >= state.seq) state.seq = ev.seq;
    try {
      state.job = await getJSON('/api/v1/job');
    } catch (e) { /* keep the last one */ }
    renderStatus(ev.status);
    if (state.latest) {
      state.latest.status = ev.status;
      renderAlerts(state.latest);
    }
  }

  function showResult(level, ...content) {
    const r = $('action-result');
    r.hidden = false;
    r.setAttribute('data-level', level);
    replace(r, content);
  }

  // Actions need the job's token (weir run writes it into a file only its user can read). It
  // comes from a link (`#token=...`, a fragment: never sent to the server or in a Referer) or
  // is asked for once, and is kept for this tab only.
  const TOKEN_KEY = 'weir-token';
  function tokenFromLink() {
    const m = /(?:^#|&)token=([^&]+)/.exec(window.location.hash);
    if (!m) return;
    try { window.sessionStorage.setItem(TOKEN_KEY, decodeURIComponent(m[1])); } catch (e) { /* storage off */ }
    window.history.replaceState(null, '', window.location.pathname + window.location.search);
  }

  function storedToken() {
    try { return window.sessionStorage.getItem(TOKEN_KEY) || ''; } catch (e) { return ''; }
  }

  async function post(path, body) {
    const send = (token) => fetch(path, {
      method: 'POST',
      headers: { 'Content-Type': 'application/json', Accept: 'application/json', Authorization: 'Bearer ' + token },
      body: body === undefined ? '' : JSON.stringify(body),
    });
    let r = await send(storedToken());
    let doc = {};
    try { doc = await r.json(); } catch (e) { /* no body */ }
    if (r.status === 401) {
      const token = window.prompt((doc.error || 'This action needs the job\'s token.') + '\n\nToken:');
      if (!token) throw new Error(doc.error || 'no token');
      r = await send(token.trim());
      doc = {};
      try { doc = await r.json(); } catch (e) { /* no body */ }
      try {
        if (r.ok) window.sessionStorage.setItem(TOKEN_KEY, token.trim());
        else if (r.status === 401) window.sessionStorage.removeItem(TOKEN_KEY);
      } catch (e) { /* storage off */ }
    }
    if (!r.ok) throw new Error(doc.error || (path + ': ' + r.status));
    return doc;
  }

  async function takeSavepoint(thenStop) {
    const msg = thenStop
      ? 'Take a savepoint and stop the job once it is published?'
      : 'Take a savepoint now? The job goes on.';
    if (!window.confirm(msg)) return;
    showResult('info', 'Taking a savepoint…');
    try {
      const r = await post('/api/v1/savepoint', { stop: thenStop });
      showResult('info', 'Savepoint written to ', code(r.path), thenStop ? '; the job stops.' : '.');
    } catch (e) {
      showResult('error', 'No savepoint: ' + e.message);
    }
  }

  async function stopJob() {
    if (!window.confirm('Stop the job now, without a savepoint? Output not yet committed is discarded.')) return;
    try {
      await post('/api/v1/stop');
      showResult('info', 'Stopping the job…');
    } catch (e) {
      showResult('error', 'Not stopped: ' + e.message);
    }
  }

  function setConnected(ok) {
    const c = $('connection');
    c.setAttribute('data-connected', ok ? 'true' : 'false');
    c.title = 'Live updates: ' + (ok ? 'connected' : 'disconnected, retrying');
  }

  function connect() {
    const es = new EventSource('/api/v1/events');
    es.addEventListener('open', () => setConnected(true));
    es.addEventListener('error', () => setConnected(false));
    es.addEventListener('snapshot', (e) => onSnapshot(JSON.parse(e.data)));
    es.addEventListener('status', (e) => onStatus(JSON.parse(e.data)));
    es.addEventListener('savepoint', () => { if (state.latest) getJSON('/api/v1/checkpoints').then((c) => { state.latest.checkpoints = c; renderCheckpoints(state.latest); }).catch(() => {}); });
  }

  async function init() {
    tokenFromLink();
    $('savepoint').addEventListener('click', () => takeSavepoint(false));
    $('savepoint-stop').addEventListener('click', () => takeSavepoint(true));
    $('stop').addEventListener('click', stopJob);
    let resize = null;
    window.addEventListener('resize', () => {
      clearTimeout(resize);
      resize = setTimeout(() => { if (state.latest) renderCharts(); }, 150);
    });
    try {
      state.job = await getJSON('/api/v1/job');
    } catch (e) {
      showResult('error', 'Cannot read the job: ' + e.message);
      return;
    }
    state.nodes = state.job.nodes;
    document.title = state.job.name + ' · weir';
    $('job-name').textContent = state.job.name;
    $('job-name').title = state.job.name;
    $('plan').textContent = state.job.plan;
    renderStatus(state.job.status);
    buildGraph();
    try {
      const h = await getJSON('/api/v1/metrics/history');
      state.history = h.samples;
      state.capacity = h.capacity;
    } catch (e) { /* charts start empty */ }
    renderCharts();
    connect();
  }

  if (document.readyState === 'loading') document.addEventListener('DOMContentLoaded', init);
  else init();
}());
