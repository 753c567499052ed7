// nsqadmin web UI: a dependency-free single-page app over nsqadmin's JSON API.
// Views: topics (root), topic, channel, nodes, node, counter, lookup, replication (ours); the
// topic and channel pages also show the queue settings (ours), the channel page peek and redrive (ours).
// Charts are inline SVG fed by /api/history (nsqadmin's own /stats polling); Graphite
// sparklines appear when --graphite-url is set and a graph interval is chosen.
(function () {
  'use strict';

  var BASE = (typeof BASE_PATH === 'string' && BASE_PATH !== '/') ? BASE_PATH : '';
  var container = document.getElementById('container');
  var refreshTimer = null;
  var viewToken = 0;

  // ---- helpers -------------------------------------------------------------------------------

  function esc(s) {
    return String(s === undefined || s === null ? '' : s)
      .replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;')
      .replace(/"/g, '&quot;').replace(/'/g, '&#39;');
  }

  function commafy(n) {
    if (n === undefined || n === null || isNaN(n)) { return '0'; }
    var s = String(Math.round(n));
    var neg = s.charAt(0) === '-';
    if (neg) { s = s.slice(1); }
    var out = '';
    while (s.length > 3) { out = ',' + s.slice(-3) + out; s = s.slice(0, -3); }
    return (neg ? '-' : '') + s + out;
  }

  function round2(v) { return Math.round(v * 100) / 100; }

  // Nanoseconds to a human duration, as the reference's nanotohuman.
  function nanotohuman(n) {
    n = Number(n) || 0;
    var s = '';
    var hours = Math.floor(n / 3600e9);
    if (hours > 0) { s += hours + 'h'; n -= hours * 3600e9; }
    var mins = Math.floor(n / 60e9);
    if (mins > 0) { s += mins + 'm'; n -= mins * 60e9; }
    if (n >= 1e9) { return s + round2(n / 1e9) + 's'; }
    if (s !== '' && n < 1e3) { return round2(n) + 'ns'; }
    if (n >= 1e6) { return s + round2(n / 1e6) + 'ms'; }
    if (n >= 1e3) { return s + round2(n / 1e3) + 'us'; }
    return s + round2(n) + 'ns';
  }

  function ordinal(q) {
    var v = Math.floor(q * 100);
    var last = v % 10;
    var suffix = 'th';
    if (last === 1 && v % 100 !== 11) { suffix = 'st'; }
    else if (last === 2 && v % 100 !== 12) { suffix = 'nd'; }
    else if (last === 3 && v % 100 !== 13) { suffix = 'rd'; }
    return v + suffix;
  }

  function url(path) { return BASE + path; }
  function enc(s) { return encodeURIComponent(s); }

  function api(method, path, body) {
    var ctrl = new AbortController();
    var timer = setTimeout(function () { ctrl.abort(); }, 20000);
    var opts = {
      method: method,
      headers: {
        'X-UserAgent': USER_AGENT,
        'Accept': 'application/vnd.nsq; version=1.0',
        'Content-Type': 'application/json'
      },
      signal: ctrl.signal
    };
    if (body !== undefined) { opts.body = JSON.stringify(body); }
    return fetch(url('/api' + path), opts).then(function (r) {
      clearTimeout(timer);
      return r.text().then(function (t) {
        var data = {};
        try { data = t ? JSON.parse(t) : {}; } catch (e) { data = { message: t }; }
        if (!r.ok) { throw { message: (data && data.message) || ('HTTP ' + r.status) }; }
        return data;
      });
    }, function () {
      clearTimeout(timer);
      throw { message: 'ERROR: failed to connect to nsqadmin' };
    });
  }

  function el(html) {
    var t = document.createElement('template');
    t.innerHTML = html.trim();
    return t.content.firstChild;
  }

  // ---- graph interval (Graphite) --------------------------------------------------------------

  var INTERVALS = ['1h', '2h', '12h', '24h', '48h', '168h', 'off'];

  function graphInterval() {
    if (!GRAPH_ENABLED) { return 'off'; }
    var m = /[?&]t=([^&]+)/.exec(location.search);
    if (m && INTERVALS.indexOf(m[1]) >= 0) {
      localStorage.setItem('graph_interval', m[1]);
      return m[1];
    }
    var v = localStorage.getItem('graph_interval');
    return INTERVALS.indexOf(v) >= 0 ? v : '2h';
  }

  function graphsOn() { return GRAPH_ENABLED && graphInterval() !== 'off'; }

  function sanitize(s) {
    return String(s).replace(/ /g, '_').replace(/\//g, '-').replace(/[^a-zA-Z0-9\-_.]/g, '');
  }

  function hostKey(node) { return node === '*' ? '*' : node.replace(/[.:]/g, '_'); }

  var COUNTERS = ['requeue_count', 'timeout_count', 'message_count', 'gc_runs'];

  function metricKey(key) {
    var counter = COUNTERS.indexOf(key) >= 0;
    var fmt = counter ? STATSD_COUNTER_FORMAT : STATSD_GAUGE_FORMAT;
    return fmt ? fmt.replace(/%s/g, key) : key;
  }

  function graphTarget(node, topic, channel, key) {
    var prefix = STATSD_PREFIX.replace(/%s/g, hostKey(node)) + '.';
    var name = prefix + 'topic.' + sanitize(topic);
    if (channel) { name += '.channel.' + sanitize(channel); }
    return 'sumSeries(' + metricKey(name + '.' + key) + ')';
  }

  function sparkline(target, color) {
    if (!graphsOn()) { return ''; }
    var iv = graphInterval();
    var q = ['colorList=' + color, 'height=20', 'width=120', 'hideGrid=true', 'hideLegend=true',
      'hideAxes=true', 'bgcolor=ff000000', 'fgcolor=black', 'margin=0', 'yMin=0',
      'lineMode=connected', 'drawNullAsZero=false', 'from=-' + iv, 'until=-1min',
      'target=' + enc('summarize(' + target + ',"' + STATSD_INTERVAL + 'sec","avg")')];
    return '<img class="sparkline" alt="" src="' + esc(GRAPHITE_URL + '/render?' + q.join('&')) + '">';
  }

  function rateCell(target) {
    if (!graphsOn()) { return ''; }
    var id = 'rate' + Math.random().toString(36).slice(2);
    api('GET', '/graphite?metric=rate&target=' + enc(target)).then(function (d) {
      var c = document.getElementById(id);
      if (c) { c.textContent = d.rate; }
    }, function () {
      var c = document.getElementById(id);
      if (c) { c.textContent = 'ERROR'; }
    });
    return '<td class="num" id="' + id + '">…</td>';
  }

  // ---- layout ---------------------------------------------------------------------------------

  function header() {
    var gsel = '';
    if (GRAPH_ENABLED) {
      var cur = graphInterval();
      gsel = '<label class="timeframe">Graph Timeframe <select id="graph-interval">' +
        INTERVALS.map(function (i) {
          return '<option' + (i === cur ? ' selected' : '') + '>' + i + '</option>';
        }).join('') + '</select></label>';
    }
    return '<header class="navbar"><nav>' +
      '<a class="brand" href="' + url('/') + '" data-link><span class="logo">NSQ</span></a>' +
      '<a href="' + url('/') + '" data-link data-nav="topics">Streams</a>' +
      '<a href="' + url('/nodes') + '" data-link data-nav="nodes">Nodes</a>' +
      '<a href="' + url('/counter') + '" data-link data-nav="counter">Counter</a>' +
      '<a href="' + url('/lookup') + '" data-link data-nav="lookup">Lookup</a>' +
      '<a href="' + url('/replication') + '" data-link data-nav="replication">Replication</a>' +
      gsel + '<span class="spacer"></span>' +
      '<a class="ext" href="https://nsq.io/" target="_blank" rel="noopener">Docs</a>' +
      '<a class="ext" href="https://github.com/nsqio/nsq" target="_blank" rel="noopener">GitHub</a>' +
      '<span class="version">v' + esc(VERSION) + '</span></nav></header>' +
      '<div id="alerts"></div><main id="main"></main>' +
      '<dialog id="confirm"><form method="dialog"><p id="confirm-text"></p>' +
      '<div class="actions"><button value="cancel" class="btn">Cancel</button>' +
      '<button value="ok" class="btn btn-danger" id="confirm-ok">OK</button></div></form></dialog>';
  }

  function main() { return document.getElementById('main'); }

  function showWarning(msg) {
    var a = document.getElementById('alerts');
    if (a && msg) {
      a.innerHTML = '<div class="alert alert-warning" role="alert">' + esc(msg) + '</div>';
    }
  }

  function showError(msg) {
    var a = document.getElementById('alerts');
    if (a) { a.innerHTML = '<div class="alert alert-danger" role="alert">' + esc(msg) + '</div>'; }
  }

  function clearAlerts() {
    var a = document.getElementById('alerts');
    if (a) { a.innerHTML = ''; }
  }

  function confirmAction(action, name) {
    var d = document.getElementById('confirm');
    document.getElementById('confirm-text').innerHTML =
      'Are you sure you want to <strong>' + esc(action) + '</strong> <em>' + esc(name) + '</em>?';
    return new Promise(function (resolve) {
      d.returnValue = '';
      d.addEventListener('close', function h() {
        d.removeEventListener('close', h);
        resolve(d.returnValue === 'ok');
      });
      d.showModal();
      document.getElementById('confirm-ok').focus();
    });
  }

  function spinner() { return '<div class="spinner" aria-label="loading"></div>'; }

  function notice(text) { return '<div class="notice">' + text + '</div>'; }

  function breadcrumb(parts) {
    return '<ol class="breadcrumb">' + parts.map(function (p) {
      return '<li>' + (p[1] ? '<a href="' + p[1] + '" data-link>' + esc(p[0]) + '</a>' : esc(p[0])) + '</li>';
    }).join('') + '</ol>';
  }

  function hostCell(node, hostname, paused) {
    var port = node.slice(node.lastIndexOf(':') + 1);
    var addr = node.slice(0, node.lastIndexOf(':')).replace(/^\[|\]$/g, '');
    var text = esc(hostname) + ':' + esc(port);
    var link = '<a href="' + url('/nodes/' + enc(node)) + '" data-link>' +
      (hostname !== addr ? text + ' (' + esc(node) + ')' : esc(node)) + '</a>';
    return link + (paused ? ' <span class="label label-primary">paused</span>' : '');
  }

  function e2eHeaders(e2e) {
    return (e2e && e2e.percentiles ? e2e.percentiles : []).map(function (p) {
      return '<th class="num">' + ordinal(p.quantile) + '</th>';
    }).join('');
  }

  function e2eCells(e2e, n) {
    var ps = e2e && e2e.percentiles ? e2e.percentiles : [];
    var out = ps.map(function (p) {
      return '<td class="num" title="min: ' + esc(nanotohuman(p.min)) + ', max: ' +
        esc(nanotohuman(p.max)) + '">' + esc(nanotohuman(p.average)) + '</td>';
    });
    while (out.length < n) { out.push('<td></td>'); }
    return out.join('');
  }

  function num(field, v) { return '<td class="num" data-field="' + field + '">' + commafy(v) + '</td>'; }

  // ---- charts (inline SVG) --------------------------------------------------------------------

  var COLORS = ['#2a6fdb', '#d9534f', '#2e9e5b', '#8e44ad', '#e67e22', '#16a085', '#7f8c8d'];

  function fmtShort(v) {
    if (v >= 1e9) { return round2(v / 1e9) + 'G'; }
    if (v >= 1e6) { return round2(v / 1e6) + 'M'; }
    if (v >= 1e4) { return round2(v / 1e3) + 'k'; }
    return String(round2(v));
  }

  function clock(ms) {
    var d = new Date(ms);
    function p(x) { return (x < 10 ? '0' : '') + x; }
    return p(d.getHours()) + ':' + p(d.getMinutes()) + ':' + p(d.getSeconds());
  }

  // series: [{name, values: [[t, v|null], ...]}]
  function chartSVG(metric, title, series, unit) {
    var W = 420, H = 170, L = 44, R = 8, T = 10, B = 22;
    var pts = 0, tmin = Infinity, tmax = -Infinity, vmax = 0, last = null;
    series.forEach(function (s) {
      s.values.forEach(function (p) {
        if (p[1] === null || p[1] === undefined) { return; }
        pts++;
        tmin = Math.min(tmin, p[0]); tmax = Math.max(tmax, p[0]);
        vmax = Math.max(vmax, p[1]);
      });
    });
    if (series.length && series[0].values.length) {
      last = series[0].values[series[0].values.length - 1][1];
    }
    if (vmax <= 0) { vmax = 1; }
    if (!(tmax > tmin)) { tmax = tmin + 1; }
    var sx = function (t) { return L + (t - tmin) / (tmax - tmin) * (W - L - R); };
    var sy = function (v) { return T + (1 - v / vmax) * (H - T - B); };
    var g = '';
    for (var i = 0; i <= 4; i++) {
      var y = T + i * (H - T - B) / 4;
      g += '<line class="grid" x1="' + L + '" x2="' + (W - R) + '" y1="' + y + '" y2="' + y + '"/>';
      g += '<text class="axis" x="' + (L - 6) + '" y="' + (y + 4) + '" text-anchor="end">' +
        fmtShort(vmax * (4 - i) / 4) + '</text>';
    }
    if (pts) {
      g += '<text class="axis" x="' + L + '" y="' + (H - 6) + '">' + clock(tmin) + '</text>';
      g += '<text class="axis" x="' + (W - R) + '" y="' + (H - 6) + '" text-anchor="end">' + clock(tmax) + '</text>';
    } else {
      g += '<text class="axis" x="' + (W / 2) + '" y="' + (H / 2) + '" text-anchor="middle">collecting data…</text>';
    }
    var lines = series.map(function (s, idx) {
      var d = '';
      var pen = false;
      s.values.forEach(function (p) {
        if (p[1] === null || p[1] === undefined) { pen = false; return; }
        d += (pen ? 'L' : 'M') + sx(p[0]).toFixed(1) + ' ' + sy(p[1]).toFixed(1);
        pen = true;
      });
      return '<path class="line" stroke="' + COLORS[idx % COLORS.length] + '" d="' + d + '"/>';
    }).join('');
    var legend = series.map(function (s, idx) {
      return '<span class="legend-item"><i style="background:' + COLORS[idx % COLORS.length] + '"></i>' + esc(s.name) + '</span>';
    }).join('');
    var lastText = last === null || last === undefined ? '–' : fmtShort(last) + (unit || '');
    return '<figure class="chart" data-metric="' + esc(metric) + '" data-points="' + pts +
      '" data-last="' + esc(last === null || last === undefined ? '' : last) + '">' +
      '<figcaption><span>' + esc(title) + '</span><span class="chart-last">' + esc(lastText) + '</span></figcaption>' +
      '<svg viewBox="0 0 ' + W + ' ' + H + '" role="img" aria-label="' + esc(title) + '">' +
      g + lines + '</svg><div class="legend">' + legend + '</div></figure>';
  }

  function pick(samples, key) {
    return samples.map(function (s) { return [s.t, s[key]]; });
  }

  // The queue-settings counters (messages given up on), present in a history series only
  // when one of them is non-zero somewhere in it.
  var GIVEN_UP = [['expired', 'expired'], ['dead_lettered', 'dead-lettered'], ['dropped', 'dropped']];

  function givenUpChart(samples) {
    var any = samples.some(function (s) {
      return GIVEN_UP.some(function (f) { return (s[f[0]] || 0) > 0 || (s[f[0] + '_rate'] || 0) > 0; });
    });
    if (!any) { return ''; }
    return chartSVG('given_up', 'Given up (msgs/s)', GIVEN_UP.map(function (f) {
      return { name: f[1], values: pick(samples, f[0] + '_rate') };
    }), '/s');
  }

  function historyCharts(target, path, kind) {
    if (!HISTORY_INTERVAL_MS) { return; }
    var token = viewToken;
    function load() {
      if (token !== viewToken) { return; }
      api('GET', '/history' + path).then(function (h) {
        var box = document.getElementById(target);
        if (!box || token !== viewToken) { return; }
        var html = '';
        if (kind === 'topic') {
          var chans = h.channels || [];
          html += chartSVG('rate', 'Message rate (msgs/s)', [{ name: h.topic, values: pick(h.samples, 'rate') }], '/s');
          html += chartSVG('depth', 'Depth', [{ name: 'topic', values: pick(h.samples, 'depth') }].concat(
            chans.map(function (c) { return { name: c.channel, values: pick(c.samples, 'depth') }; })));
          html += chartSVG('in_flight', 'In-Flight', chans.length ? chans.map(function (c) {
            return { name: c.channel, values: pick(c.samples, 'in_flight') };
          }) : [{ name: 'in-flight', values: pick(h.samples, 'in_flight') }]);
          html += givenUpChart(h.samples);
        } else if (kind === 'channel') {
          html += chartSVG('rate', 'Message rate (msgs/s)', [{ name: h.channel, values: pick(h.samples, 'rate') }], '/s');
          html += chartSVG('depth', 'Depth', [{ name: 'depth', values: pick(h.samples, 'depth') }]);
          html += chartSVG('in_flight', 'In-Flight', [{ name: 'in-flight', values: pick(h.samples, 'in_flight') },
            { name: 'deferred', values: pick(h.samples, 'deferred') }]);
          html += givenUpChart(h.samples);
        } else {
          html += chartSVG('rate', 'Cluster message rate (msgs/s)', [{ name: 'processed', values: pick(h.samples, 'rate') }], '/s');
          html += chartSVG('depth', 'Cluster depth', [{ name: 'depth', values: pick(h.samples, 'depth') },
            { name: 'in-flight', values: pick(h.samples, 'in_flight') }]);
        }
        box.innerHTML = html;
      }, function () { /* history is best-effort */ });
    }
    load();
    refreshTimer = setInterval(load, Math.max(1000, HISTORY_INTERVAL_MS));
  }

  function chartsBox(id) {
    if (!HISTORY_INTERVAL_MS) { return ''; }
    return '<section class="charts" id="' + id + '" aria-label="charts"></section>';
  }

  // ---- views ----------------------------------------------------------------------------------

  function load(promise, render) {
    var token = viewToken;
    main().innerHTML = spinner();
    promise.then(function (data) {
      if (token !== viewToken) { return; }
      render(data);
      if (data && data.message) { showWarning(data.message); }
    }, function (e) {
      if (token !== viewToken) { return; }
      main().innerHTML = '<div class="alert alert-danger view-error" role="alert">' + esc(e.message) + '</div>';
    });
  }

  function actionThen(promise, after) {
    promise.then(function (d) {
      if (d && d.message) { showWarning(d.message); }
      after();
    }, function (e) { showError(e.message); });
  }

  function topicsView() {
    load(api('GET', '/topics'), function (d) {
      var topics = d.topics || [];
      var g = graphsOn();
      var html = '<h2>Topics</h2>' + chartsBox('cluster-charts');
      if (!topics.length) {
        html += notice('No Topics Found');
      } else {
        html += '<div class="table-wrap"><table class="table" id="topics-table"><thead><tr><th>Topic</th>' +
          (g ? '<th>Depth</th><th>Messages</th><th>Rate</th>' : '') + '</tr></thead><tbody>' +
          topics.map(function (t) {
            return '<tr data-topic="' + esc(t) + '"><td><a href="' + url('/topics/' + enc(t)) + '" data-link>' + esc(t) + '</a></td>' +
              (g ? '<td>' + sparkline(graphTarget('*', t, '', 'depth'), 'red') + '</td><td>' +
                sparkline(graphTarget('*', t, '', 'message_count'), 'blue') + '</td>' +
                rateCell(graphTarget('*', t, '', 'message_count')) : '') + '</tr>';
          }).join('') + '</tbody></table></div>';
      }
      main().innerHTML = html;
      historyCharts('cluster-charts', '', 'cluster');
    });
  }

  function adminButtons(kind, paused) {
    if (!IS_ADMIN) { return ''; }
    return '<div class="btn-row">' +
      '<button class="btn btn-warning" data-action="empty">Empty Queue</button>' +
      '<button class="btn btn-danger" data-action="delete">Delete ' + kind + '</button>' +
      (paused ? '<button class="btn btn-success" data-action="unpause">UnPause ' + kind + '</button>'
        : '<button class="btn btn-primary" data-action="pause">Pause ' + kind + '</button>') +
      '</div>';
  }

  function wireActions(kind, name, apiPath, afterDelete) {
    main().querySelectorAll('[data-action]').forEach(function (b) {
      b.addEventListener('click', function () {
        var action = b.getAttribute('data-action');
        var label = action === 'delete' ? 'delete' : action === 'empty' ? 'empty' : action;
        confirmAction(label, name).then(function (ok) {
          if (!ok) { return; }
          if (action === 'delete') {
            actionThen(api('DELETE', apiPath), afterDelete);
          } else {
            actionThen(api('POST', apiPath, { action: action }), render);
          }
        });
      });
    });
  }

  // ---- queue settings, counters and peek (ours; nsqd's /topic/config, /channel/config and
  // /channel/peek through nsqadmin's /api/settings/:topic[/:channel] and /api/peek/:topic/:channel)

  var SETTING_KEYS = {
    topic: ['max_depth', 'max_bytes', 'overflow', 'ttl', 'mem_queue_size'],
    channel: ['max_attempts', 'dead_letter_topic', 'ttl', 'max_depth', 'max_bytes', 'overflow', 'mem_queue_size']
  };
  var SETTING_HELP = {
    max_depth: 'messages; a publish past it is refused (or, overflow drop_oldest, the oldest dropped)',
    max_bytes: 'bytes (4 + 26 + body per message); a publish past it is refused (or, overflow drop_oldest, the oldest dropped)',
    overflow: 'refuse or drop_oldest',
    mem_queue_size: 'messages kept in memory before the disk (0: all on disk)',
    ttl: 'a Go duration (10m, 1h30m); older messages are not delivered',
    max_attempts: 'deliveries before a message is dead-lettered (or dropped)',
    dead_letter_topic: 'where messages past max_attempts or their ttl go'
  };
  var SOURCES = {
    set: ['label-primary', 'set here'],
    'default': ['label-default', 'node default'],
    topic: ['label-success', 'from topic'],
    off: ['label-default', 'off'],
    differs: ['label-warning', 'differs']
  };

  function settingValue(s) {
    if (!s || s.value === null || s.value === undefined) { return '–'; }
    return esc(s.value);
  }

  function sourceLabel(src) {
    var l = SOURCES[src] || ['label-default', src];
    return '<span class="label ' + l[0] + '">' + esc(l[1]) + '</span>';
  }

  // The queue-settings counters of a channel or topic object (absent when 0): [[field, title, n]].
  var QUEUE_COUNTERS = [['expired_count', 'Expired'], ['dead_lettered_count', 'Dead-Lettered'], ['dropped_count', 'Dropped']];

  function counterFields(objs) {
    return QUEUE_COUNTERS.filter(function (f) {
      return objs.some(function (o) { return (o[f[0]] || 0) > 0; });
    });
  }

  function settingsSection() {
    return '<section id="queue-settings"><h3>Settings</h3><div id="settings-body">' + spinner() + '</div></section>';
  }

  function loadSettings(topic, channel) {
    var token = viewToken;
    var path = '/settings/' + enc(topic) + (channel ? '/' + enc(channel) : '');
    api('GET', path).then(function (d) {
      if (token !== viewToken) { return; }
      renderSettings(d, path, channel ? 'channel' : 'topic');
      if (d.message) { showWarning(d.message); }
    }, function (e) {
      if (token !== viewToken) { return; }
      var b = document.getElementById('settings-body');
      if (b) { b.innerHTML = '<div class="alert alert-danger" role="alert">' + esc(e.message) + '</div>'; }
    });
  }

  function renderSettings(d, path, kind) {
    var b = document.getElementById('settings-body');
    if (!b) { return; }
    var merged = d.settings || {};
    var nodes = d.nodes || [];
    var keys = SETTING_KEYS[kind].filter(function (k) { return merged[k]; });
    Object.keys(merged).forEach(function (k) { if (keys.indexOf(k) < 0) { keys.push(k); } });
    var html = '';
    if (!keys.length) {
      html += notice('No node answered with settings.');
    } else {
      html += '<div class="table-wrap"><table class="table" id="settings-table"><thead><tr><th>Setting</th><th>Value</th><th>Source</th></tr></thead><tbody>';
      keys.forEach(function (k) {
        var s = merged[k];
        var value = settingValue(s);
        if (s.source === 'differs') {
          value = nodes.filter(function (n) { return n.settings && n.settings[k]; }).map(function (n) {
            var ns = n.settings[k];
            return '<div data-node="' + esc(n.node) + '">' + esc(n.node) + ': ' + settingValue(ns) + ' ' + sourceLabel(ns.source) + '</div>';
          }).join('');
        }
        html += '<tr data-key="' + esc(k) + '"><td><code>' + esc(k) + '</code></td><td data-field="value">' + value +
          '</td><td data-field="source">' + sourceLabel(s.source) + '</td></tr>';
      });
      html += '</tbody></table></div>';
    }
    nodes.filter(function (n) { return n.error; }).forEach(function (n) {
      html += '<div class="notice" data-node-error="' + esc(n.node) + '">' + esc(n.node) + ': ' + esc(n.error) + '</div>';
    });
    if (IS_ADMIN && keys.length) {
      // A field holds the value set here (the same on every node); empty means not set
      // here, and saving an emptied field clears the key.
      var initial = {};
      html += '<form id="settings-form" class="create-form settings-form">';
      SETTING_KEYS[kind].forEach(function (k) {
        var s = merged[k] || {};
        var v = s.source === 'set' && s.value !== null ? String(s.value) : '';
        initial[k] = v;
        var ph = s.source && s.source !== 'set' && s.source !== 'off' && s.value !== null ? String(s.value) + ' (' + s.source + ')' : 'not set';
        if (k === 'overflow') {
          var opts = kind === 'channel' ? ['', 'refuse', 'drop_oldest'] : ['', 'refuse'];
          html += '<label>' + esc(k) + ' <select name="' + k + '" id="setting-' + k + '">' + opts.map(function (o) {
            return '<option value="' + o + '"' + (o === v ? ' selected' : '') + '>' + (o || 'not set') + '</option>';
          }).join('') + '</select></label>';
        } else {
          html += '<label title="' + esc(SETTING_HELP[k] || '') + '">' + esc(k) + ' <input name="' + k + '" id="setting-' + k +
            '" value="' + esc(v) + '" placeholder="' + esc(ph) + '"></label>';
        }
      });
      html += '<button class="btn btn-primary" type="submit">Save</button></form>' +
        '<p class="help">Saving sets the changed fields on every nsqd producing the topic; an emptied field clears the key ' +
        '(the node default or the topic\'s value applies again).</p>';
      b.innerHTML = html;
      var f = document.getElementById('settings-form');
      f.addEventListener('submit', function (ev) {
        ev.preventDefault();
        var changed = {};
        var any = false;
        SETTING_KEYS[kind].forEach(function (k) {
          var v = f.elements[k].value.trim();
          if (v !== initial[k]) { changed[k] = v; any = true; }
        });
        if (!any) { showWarning('Nothing changed.'); return; }
        api('POST', path, { settings: changed }).then(function (nd) {
          clearAlerts();
          renderSettings(nd, path, kind);
          if (nd.message) { showWarning(nd.message); }
        }, function (e) { showError(e.message); });
      });
      return;
    }
    b.innerHTML = html;
  }

  function peekSection() {
    if (!IS_ADMIN) { return ''; }
    return '<section id="peek"><h3>Peek</h3><p class="help">The next messages each nsqd would deliver on this channel, ' +
      'without taking them (nsqd\'s <code>--http-peek</code>).</p><div class="btn-row"><button class="btn" id="peek-btn">Peek</button></div>' +
      '<div id="peek-result"></div></section>';
  }

  function fmtNs(ns) {
    if (ns === null || ns === undefined) { return ''; }
    return new Date(ns / 1e6).toISOString().replace('T', ' ').replace('Z', '');
  }

  var DEAD_LETTER_REASONS = { max_attempts: 'max attempts', expired: 'expired (ttl)' };

  // Where a dead letter came from: its original topic:channel, attempts there, why, and its
  // original ID; empty for a message without a known origin.
  function deadLetterCell(o) {
    if (!o) { return '<td data-field="dead_letter"></td>'; }
    var where = o.topic + ':' + o.channel;
    return '<td data-field="dead_letter" data-origin="' + esc(where) + '"><a href="' + url('/topics/' + enc(o.topic) + '/' + enc(o.channel)) +
      '" data-link data-field="origin">' + esc(where) + '</a> <span class="label label-warning" data-field="reason">' +
      esc(DEAD_LETTER_REASONS[o.reason] || o.reason) + '</span> after <span data-field="origin_attempts">' + esc(String(o.attempts)) +
      '</span> attempts<br><span class="help">original ID <code data-field="origin_id">' + esc(o.id) + '</code></span></td>';
  }

  // ---- redrive (ours; nsqd's /channel/redrive through nsqadmin's /api/redrive/:topic/:channel)

  // The last redrive's outcome, shown once the page is drawn again with its new numbers.
  var redriveDone = null;

  function redriveSection() {
    if (!IS_ADMIN) { return ''; }
    return '<section id="redrive"><h3>Redrive</h3><p class="help">Moves this channel\'s queued messages (dead letters) back into ' +
      'the channel each was dead-lettered from, as new messages; or, with a topic, publishes them there. A message whose origin its ' +
      'nsqd does not know is left here (skipped).</p><form id="redrive-form" class="create-form">' +
      '<label>To topic (optional) <input id="redrive-to" name="to" placeholder="where each came from" autocomplete="off"></label>' +
      '<button class="btn btn-warning" type="submit" id="redrive-btn">Redrive</button></form><div id="redrive-result"></div></section>';
  }

  function redriveSummary(d) {
    return 'moved ' + commafy(d.moved) + ', skipped ' + commafy(d.skipped) + ', failed ' + commafy(d.failed);
  }

  function wireRedrive(topic, channel) {
    var f = document.getElementById('redrive-form');
    if (!f) { return; }
    var key = topic + '/' + channel;
    if (redriveDone && redriveDone.key === key) {
      document.getElementById('redrive-result').innerHTML = '<div class="notice" id="redrive-summary">Redrive' +
        (redriveDone.to ? ' to topic ' + esc(redriveDone.to) : '') + ': ' + esc(redriveDone.text) + '</div>';
      if (redriveDone.warning) { showWarning(redriveDone.warning); }
    }
    redriveDone = null;
    f.addEventListener('submit', function (ev) {
      ev.preventDefault();
      var to = document.getElementById('redrive-to').value.trim();
      confirmAction('redrive', to ? channel + ' into topic ' + to : channel).then(function (ok) {
        if (!ok) { return; }
        var body = to ? { to: to } : {};
        api('POST', '/redrive/' + enc(topic) + '/' + enc(channel), body).then(function (d) {
          redriveDone = { key: key, to: to, text: redriveSummary(d), warning: d.message };
          render();
        }, function (e) { showError(e.message); });
      });
    });
  }

  function wirePeek(topic, channel) {
    var btn = document.getElementById('peek-btn');
    if (!btn) { return; }
    var token = viewToken;
    btn.addEventListener('click', function () {
      var out = document.getElementById('peek-result');
      out.innerHTML = spinner();
      api('GET', '/peek/' + enc(topic) + '/' + enc(channel) + '?n=20').then(function (d) {
        if (token !== viewToken) { return; }
        var html = '';
        (d.nodes || []).forEach(function (n) {
          if (n.peek === 'off') {
            html += '<div class="notice" data-peek-node="' + esc(n.node) + '">' + esc(n.node) + ': peek is off on this node ' +
              '(nsqd runs without <code>--http-peek</code>)</div>';
          } else if (n.peek === 'error') {
            html += '<div class="alert alert-danger" data-peek-node="' + esc(n.node) + '">' + esc(n.node) + ': ' + esc(n.error) + '</div>';
          }
        });
        var ms = d.messages || [];
        var onNodes = (d.nodes || []).filter(function (n) { return n.peek === 'on'; }).length;
        if (!ms.length) {
          if (onNodes) { html += notice('No messages.'); }
        } else {
          var many = (d.nodes || []).length > 1;
          // A column for dead letters' origins once a message has one (nsqd's `dead_letter`).
          var dl = ms.some(function (m) { return m.dead_letter; });
          html += '<div class="table-wrap"><table class="table" id="peek-table"><thead><tr>' + (many ? '<th>NSQd Host</th>' : '') +
            '<th>ID</th><th>State</th><th class="num">Attempts</th><th>Timestamp (UTC)</th><th>Due (UTC)</th>' +
            (dl ? '<th>Dead-Lettered From</th>' : '') + '<th>Preview</th></tr></thead><tbody>' +
            ms.map(function (m) {
              return '<tr data-id="' + esc(m.id) + '">' + (many ? '<td>' + esc(m.node) + '</td>' : '') + '<td><code>' + esc(m.id) + '</code></td>' +
                '<td data-field="state"><span class="label ' + (m.state === 'queued' ? 'label-default' : m.state === 'in_flight' ? 'label-primary' : 'label-warning') +
                '">' + esc(m.state) + '</span></td>' + num('attempts', m.attempts) + '<td data-field="timestamp">' + esc(fmtNs(m.timestamp)) +
                '</td><td data-field="due">' + esc(fmtNs(m.due)) + '</td>' + (dl ? deadLetterCell(m.dead_letter) : '') +
                '<td data-field="preview" class="preview">' + esc(m.preview) + '</td></tr>';
            }).join('') + '</tbody></table></div>';
        }
        out.innerHTML = html;
        if (d.message) { showWarning(d.message); }
      }, function (e) {
        if (token !== viewToken) { return; }
        out.innerHTML = '';
        showError(e.message);
      });
    });
  }

  function topicView(topic) {
    load(api('GET', '/topics/' + enc(topic)), function (t) {
      var g = graphsOn();
      var html = breadcrumb([['Streams', url('/')], [topic]]) +
        '<h2>Topic: <strong>' + esc(topic) + '</strong></h2>';
      var nodes = t.nodes || [];
      if (!nodes.length) {
        main().innerHTML = html + notice('There are no producers for this topic. Check the ' +
          '<a href="' + url('/lookup') + '" data-link>Lookup</a> page for inactive topics.');
        return;
      }
      html += adminButtons('Topic', t.paused) + chartsBox('topic-charts');
      var np = (t.e2e_processing_latency.percentiles || []).length;
      html += '<h3>Topic Message Queue</h3><div class="table-wrap"><table class="table" id="topic-nodes"><thead><tr>' +
        '<th>NSQd Host</th><th class="num">Depth</th><th class="num">Memory + Disk</th>' +
        '<th class="num">Messages</th>' + (g ? '<th>Rate</th>' : '') + '<th class="num">Channels</th>' +
        e2eHeaders(t.e2e_processing_latency) + '</tr></thead><tbody>';
      nodes.forEach(function (n) {
        html += '<tr data-node="' + esc(n.node) + '"><td>' +
          '<button class="btn-x" title="tombstone topic on this node" data-tombstone="' + esc(n.node) + '">✘</button> ' +
          hostCell(n.node, n.hostname, n.paused) + '</td>' + num('depth', n.depth) +
          '<td class="num">' + commafy(n.memory_depth) + ' + ' + commafy(n.backend_depth) + '</td>' +
          num('message_count', n.message_count) + (g ? rateCell(graphTarget(n.node, topic, '', 'message_count')) : '') +
          num('channels', (n.channels || []).length) + e2eCells(n.e2e_processing_latency, np) + '</tr>';
        if (g) {
          html += '<tr class="spark"><td></td><td>' + sparkline(graphTarget(n.node, topic, '', 'depth'), 'red') +
            '</td><td></td><td>' + sparkline(graphTarget(n.node, topic, '', 'message_count'), 'blue') + '</td><td colspan="9"></td></tr>';
        }
      });
      html += '<tr class="total" data-node="*"><td>Total:</td>' + num('depth', t.depth) +
        '<td class="num">' + commafy(t.memory_depth) + ' + ' + commafy(t.backend_depth) + '</td>' +
        num('message_count', t.message_count) + (g ? rateCell(graphTarget('*', topic, '', 'message_count')) : '') +
        num('channels', (t.channels || []).length) + e2eCells(t.e2e_processing_latency, np) + '</tr></tbody></table></div>';

      var chans = t.channels || [];
      html += '<h3>Channel Message Queues</h3>';
      if (!chans.length) {
        html += notice('Messages will queue at the topic until a channel is created.');
      } else {
        var cp = 0;
        chans.forEach(function (c) { cp = Math.max(cp, (c.e2e_processing_latency.percentiles || []).length); });
        var qc = counterFields(chans);
        html += '<div class="table-wrap"><table class="table" id="topic-channels"><thead><tr><th>Channel</th>' +
          '<th class="num">Depth</th><th class="num">Memory + Disk</th><th class="num">In-Flight</th>' +
          '<th class="num">Deferred</th><th class="num">Requeued</th><th class="num">Timed Out</th>' +
          qc.map(function (f) { return '<th class="num">' + f[1] + '</th>'; }).join('') +
          '<th class="num">Messages</th>' + (g ? '<th>Rate</th>' : '') + '<th class="num">Connections</th>' +
          e2eHeaders(chans[0].e2e_processing_latency) + '</tr></thead><tbody>';
        chans.forEach(function (c) {
          html += '<tr data-channel="' + esc(c.channel_name) + '"><td><a href="' +
            url('/topics/' + enc(topic) + '/' + enc(c.channel_name)) + '" data-link>' + esc(c.channel_name) + '</a>' +
            (c.paused ? ' <span class="label label-primary">paused</span>' : '') + '</td>' +
            num('depth', c.depth) + '<td class="num">' + commafy(c.memory_depth) + ' + ' + commafy(c.backend_depth) + '</td>' +
            num('in_flight_count', c.in_flight_count) + num('deferred_count', c.deferred_count) +
            num('requeue_count', c.requeue_count) + num('timeout_count', c.timeout_count) +
            qc.map(function (f) { return num(f[0], c[f[0]] || 0); }).join('') +
            num('message_count', c.message_count) +
            (g ? rateCell(graphTarget('*', topic, c.channel_name, 'message_count')) : '') +
            num('client_count', c.client_count) + e2eCells(c.e2e_processing_latency, cp) + '</tr>';
          if (g) {
            html += '<tr class="spark"><td></td><td>' + sparkline(graphTarget('*', topic, c.channel_name, 'depth'), 'red') +
              '</td><td></td><td>' + sparkline(graphTarget('*', topic, c.channel_name, 'in_flight_count'), 'blue') +
              '</td><td>' + sparkline(graphTarget('*', topic, c.channel_name, 'deferred_count'), 'red') +
              '</td><td>' + sparkline(graphTarget('*', topic, c.channel_name, 'requeue_count'), 'blue') +
              '</td><td>' + sparkline(graphTarget('*', topic, c.channel_name, 'timeout_count'), 'blue') +
              '</td><td>' + sparkline(graphTarget('*', topic, c.channel_name, 'message_count'), 'blue') + '</td><td colspan="9"></td></tr>';
          }
        });
        html += '</tbody></table></div>';
      }
      main().innerHTML = html + settingsSection();
      loadSettings(topic);
      wireActions('Topic', topic, '/topics/' + enc(topic), function () { navigate(url('/')); });
      main().querySelectorAll('[data-tombstone]').forEach(function (b) {
        b.addEventListener('click', function () {
          var node = b.getAttribute('data-tombstone');
          confirmAction('Tombstone', topic + ' on ' + node).then(function (ok) {
            if (!ok) { return; }
            actionThen(api('DELETE', '/nodes/' + enc(node), { topic: topic }), render);
          });
        });
      });
      historyCharts('topic-charts', '/topics/' + enc(topic), 'topic');
    });
  }

  function clientAttrs(c) {
    var a = [];
    if (c.sample_rate > 0) { a.push('<span class="label">Sampled ' + esc(c.sample_rate) + '%</span>'); }
    if (c.tls) {
      a.push('<span class="label label-warning" title="' + esc(c.tls_version + ' ' + c.tls_cipher_suite + ' ' +
        c.tls_negotiated_protocol + ' mutual:' + c.tls_negotiated_protocol_is_mutual) + '">TLS</span>');
    }
    if (c.deflate) { a.push('<span class="label label-default">Deflate</span>'); }
    if (c.snappy) { a.push('<span class="label label-primary">Snappy</span>'); }
    if (c.authed) {
      var icon = '<span class="label label-success" title="' + esc(c.auth_identity) + '">👤 authed</span>';
      a.push(c.auth_identity_url ? '<a href="' + esc(c.auth_identity_url) + '" target="_blank" rel="noopener">' + icon + '</a>' : icon);
    }
    return a.join(' ');
  }

  function clientHost(c) {
    var port = c.remote_address.slice(c.remote_address.lastIndexOf(':') + 1);
    var s = esc(c.hostname) + ':' + esc(port);
    var short = c.hostname.split('.')[0];
    if (c.client_id && c.client_id !== c.hostname && c.client_id !== short) { s += ' (' + esc(c.client_id) + ')'; }
    return '<span title="' + esc(c.remote_address) + '">' + s + '</span>';
  }

  function channelView(topic, channel) {
    load(api('GET', '/topics/' + enc(topic) + '/' + enc(channel)), function (c) {
      var g = graphsOn();
      var html = breadcrumb([['Streams', url('/')], [topic, url('/topics/' + enc(topic))], [channel]]) +
        '<h2>Topic: <strong>' + esc(topic) + '</strong> Channel: <strong>' + esc(channel) + '</strong></h2>';
      var nodes = c.nodes || [];
      if (!nodes.length) {
        main().innerHTML = html + notice('There are no producers for this channel.');
        return;
      }
      html += adminButtons('Channel', c.paused) + chartsBox('channel-charts');
      var np = (c.e2e_processing_latency.percentiles || []).length;
      var qc = counterFields([c]);
      html += '<h3>Channel</h3><div class="table-wrap"><table class="table" id="channel-nodes"><thead>' +
        '<tr><th></th><th colspan="4" class="group">Message Queues</th><th colspan="' + ((g ? 5 : 4) + qc.length) + '" class="group">Statistics</th>' +
        (np ? '<th colspan="' + np + '" class="group">E2E Processing Latency</th>' : '') + '</tr>' +
        '<tr><th>NSQd Host</th><th class="num">Depth</th><th class="num">Memory + Disk</th><th class="num">In-Flight</th>' +
        '<th class="num">Deferred</th><th class="num">Requeued</th><th class="num">Timed Out</th>' +
        qc.map(function (f) { return '<th class="num">' + f[1] + '</th>'; }).join('') + '<th class="num">Messages</th>' +
        (g ? '<th>Rate</th>' : '') + '<th class="num">Connections</th>' + e2eHeaders(c.e2e_processing_latency) + '</tr></thead><tbody>';
      function row(n, label) {
        return '<td class="num" data-field="depth">' + commafy(n.depth) + '</td><td class="num">' + commafy(n.memory_depth) + ' + ' +
          commafy(n.backend_depth) + '</td>' + num('in_flight_count', n.in_flight_count) + num('deferred_count', n.deferred_count) +
          num('requeue_count', n.requeue_count) + num('timeout_count', n.timeout_count) +
          qc.map(function (f) { return num(f[0], n[f[0]] || 0); }).join('') + num('message_count', n.message_count) +
          (g ? rateCell(graphTarget(label, topic, channel, 'message_count')) : '') + num('client_count', n.client_count) +
          e2eCells(n.e2e_processing_latency, np);
      }
      nodes.forEach(function (n) {
        html += '<tr data-node="' + esc(n.node) + '"><td>' + hostCell(n.node, n.hostname, n.paused) + '</td>' + row(n, n.node) + '</tr>';
      });
      html += '<tr class="total" data-node="*"><td>Total:</td>' + row(c, '*') + '</tr></tbody></table></div>';
      if (qc.length) {
        html += '<p class="summary" id="queue-counters">' + qc.map(function (f) {
          return '<span data-field="' + f[0] + '">' + commafy(c[f[0]]) + ' ' + f[1] + '</span>';
        }).join(', ') + '</p>';
      }
      var clients = c.clients || [];
      html += '<h3>Client Connections</h3>';
      if (!clients.length) {
        html += notice('No clients connected to this channel');
      } else {
        html += '<div class="table-wrap"><table class="table" id="channel-clients"><thead><tr><th>Client Host</th><th>User-Agent</th>' +
          '<th>Attributes</th><th>NSQd Host</th><th class="num">In-Flight</th><th class="num">Ready Count</th>' +
          '<th class="num">Finished</th><th class="num">Requeued</th><th class="num">Messages</th><th>Connected</th></tr></thead><tbody>' +
          clients.map(function (cl) {
            return '<tr><td>' + clientHost(cl) + '</td><td>' + esc(cl.user_agent) + '</td><td>' + clientAttrs(cl) + '</td>' +
              '<td><a href="' + url('/nodes/' + enc(cl.node)) + '" data-link>' + esc(cl.node) + '</a></td>' +
              num('in_flight_count', cl.in_flight_count) + num('ready_count', cl.ready_count) +
              num('finish_count', cl.finish_count) + num('requeue_count', cl.requeue_count) +
              num('message_count', cl.message_count) + '<td>' + esc(nanotohuman(cl.connected)) + '</td></tr>';
          }).join('') + '</tbody></table></div>';
      }
      main().innerHTML = html + settingsSection() + peekSection() + redriveSection();
      loadSettings(topic, channel);
      wirePeek(topic, channel);
      wireRedrive(topic, channel);
      wireActions('Channel', channel, '/topics/' + enc(topic) + '/' + enc(channel),
        function () { navigate(url('/topics/' + enc(topic))); });
      historyCharts('channel-charts', '/topics/' + enc(topic) + '/' + enc(channel), 'channel');
    });
  }

  function nodesView() {
    load(api('GET', '/nodes'), function (d) {
      var nodes = d.nodes || [];
      var lmode = NSQLOOKUPD.length > 0;
      var html = '<h2>NSQd Nodes (' + nodes.length + ')</h2><div class="table-wrap"><table class="table" id="nodes-table"><thead><tr>' +
        '<th>Hostname</th><th>Broadcast Address</th><th class="num">TCP Port</th><th class="num">HTTP Port</th><th>Version</th>' +
        (lmode ? '<th>Lookupd Conns.</th>' : '') + '<th>Topics</th></tr></thead><tbody>';
      nodes.forEach(function (n, i) {
        var addr = (n.broadcast_address.indexOf(':') >= 0 ? '[' + n.broadcast_address + ']' : n.broadcast_address) + ':' + n.http_port;
        var ra = n.remote_addresses || [];
        html += '<tr' + (n.out_of_date ? ' class="warning" title="out of date"' : '') + ' data-node="' + esc(addr) + '">' +
          '<td>' + esc(n.hostname) + '</td><td><a href="' + url('/nodes/' + enc(addr)) + '" data-link>' + esc(n.broadcast_address) + '</a></td>' +
          '<td class="num">' + esc(n.tcp_port) + '</td><td class="num">' + esc(n.http_port) + '</td><td>' + esc(n.version) + '</td>' +
          (lmode ? '<td><button class="btn btn-sm' + (ra.length !== NSQLOOKUPD.length ? ' btn-warning' : '') +
            '" data-toggle="ra' + i + '">' + ra.length + '</button><ul class="hidden" id="ra' + i + '">' +
            ra.map(function (r) { return '<li>' + esc(r) + '</li>'; }).join('') + '</ul></td>' : '') +
          '<td><span class="badge">' + (n.topics || []).length + '</span> ' + (n.topics || []).map(function (t) {
            return '<a href="' + url('/topics/' + enc(t.topic)) + '" data-link class="label ' +
              (t.tombstoned ? 'label-warning" title="this topic is currently tombstoned on this node' : 'label-primary') + '">' + esc(t.topic) + '</a>';
          }).join(' ') + '</td></tr>';
      });
      html += '</tbody></table></div>';
      main().innerHTML = html;
      main().querySelectorAll('[data-toggle]').forEach(function (b) {
        b.addEventListener('click', function () {
          document.getElementById(b.getAttribute('data-toggle')).classList.toggle('hidden');
        });
      });
    });
  }

  // The node's replication state (ours, not in NSQ's nsqadmin/static/js/views/node.hbs): the
  // `replication` key of /api/nodes/:node, present only when the nsqd replicates. '' without.
  function replicationPanel(r) {
    if (!r) { return ''; }
    function yes(v) { return v ? 'yes' : ''; }
    var html = '<section id="node-replication"><h3>Replication</h3><p class="summary">' +
      '<span data-field="node_id">Node ID <strong>' + esc(r.node_id) + '</strong></span>, ' +
      '<span data-field="epoch">Epoch ' + esc(r.epoch) + '</span>, ' +
      '<span data-field="replicas">' + commafy(r.replicas) + ' Replicas</span>, ' +
      '<span data-field="publish_waiting">' + commafy(r.publish_waiting) + ' Publishes Waiting</span>, ' +
      '<span data-field="publish_failures">' + commafy(r.publish_failures) + ' Publish Failures</span>, ' +
      '<span data-field="takeovers">' + commafy(r.takeovers) + ' Takeovers</span>' +
      (r.fenced === undefined ? '' : ', <span data-field="fenced">' +
        (r.fenced ? '<span class="label label-danger">Fenced</span>' : 'Not Fenced') + '</span>') + '</p>';
    var peers = r.peers || [];
    html += '<h4>Peers</h4>';
    if (!peers.length) {
      html += notice('No replication peers.');
    } else {
      html += '<div class="table-wrap"><table class="table" id="replication-peers"><thead><tr><th>Peer</th><th>Node ID</th><th>State</th>' +
        '<th>Replica Set</th><th>Catching Up</th><th class="num">Acked Seq</th><th class="num">Lag (frames)</th><th>Last Seen</th></tr></thead><tbody>';
      peers.forEach(function (p) {
        var up = p.state === 'connected';
        html += '<tr data-peer="' + esc(p.address) + '"><td>' + esc(p.address) + '</td><td><code>' + esc(p.node_id) + '</code></td>' +
          '<td data-field="state"><span class="label ' + (up ? 'label-success' : 'label-warning') + '">' + esc(p.state) + '</span></td>' +
          '<td data-field="in_replica_set">' + yes(p.in_replica_set) + '</td><td data-field="catching_up">' + yes(p.catching_up) + '</td>' +
          num('acked_seq', p.acked_seq) + num('lag_frames', p.lag_frames) +
          '<td data-field="last_seen">' + (p.last_seen_ms === null || p.last_seen_ms === undefined ? 'never' :
            esc(nanotohuman(p.last_seen_ms * 1e6)) + ' ago') + '</td></tr>';
      });
      html += '</tbody></table></div>';
    }
    var backlogs = r.backlogs || [];
    html += '<h4>Replica Backlogs</h4>';
    if (!backlogs.length) {
      html += notice('No replica backlogs on this node.');
    } else {
      html += '<div class="table-wrap"><table class="table" id="replica-backlogs"><thead><tr><th>Origin</th><th class="num">Epoch</th><th>State</th>' +
        '<th class="num">Messages</th><th class="num">Bytes</th><th class="num">Last Seq</th><th class="num">Segments</th></tr></thead><tbody>';
      backlogs.forEach(function (b) {
        html += '<tr data-origin="' + esc(b.origin + '.' + b.epoch) + '"><td><code>' + esc(b.origin) + '</code></td>' + num('epoch', b.epoch) +
          '<td data-field="state">' + esc(b.state) + '</td>' + num('messages', b.messages) + num('bytes', b.bytes) +
          num('last_seq', b.last_seq) + num('segments', b.segments) + '</tr>';
      });
      html += '</tbody></table></div>';
    }
    return html + '</section>';
  }

  function nodeView(node) {
    load(api('GET', '/nodes/' + enc(node)), function (d) {
      var topics = d.topics || [];
      var html = breadcrumb([['Nodes', url('/nodes')], [node]]) + '<h2>Node: <strong>' + esc(node) + '</strong></h2>';
      if (graphsOn()) {
        var prefix = STATSD_PREFIX.replace(/%s/g, hostKey(node)) + '.';
        ['*_bytes', 'gc_pause_*', 'gc_runs', 'heap_objects'].forEach(function (k) {
          var t = k === 'gc_runs' ? metricKey('movingAverage(' + prefix + 'mem.gc_runs,45)') : metricKey(prefix + 'mem.' + k);
          html += '<img class="node-graph" alt="' + esc(k) + '" src="' + esc(GRAPHITE_URL + '/render?colorList=red,green,blue,purple&height=450&width=800&fgcolor=999999&from=-' +
            graphInterval() + '&until=-1min&target=' + enc(t)) + '">';
        });
      }
      if (!topics.length) {
        main().innerHTML = html + notice('No topics on this node.') + replicationPanel(d.replication);
        return;
      }
      html += '<p class="summary"><span data-field="topics">' + commafy(topics.length) + ' Topics</span>, <span data-field="total_messages">' +
        commafy(d.total_messages) + ' Messages</span>, <span data-field="total_clients">' + commafy(d.total_clients) + ' Clients</span></p>';
      html += replicationPanel(d.replication);
      html += '<div class="table-wrap"><table class="table" id="node-topics"><tbody>';
      topics.forEach(function (t) {
        var tp = '/topics/' + enc(t.topic_name);
        html += '<tr class="topic-row" data-topic="' + esc(t.topic_name) + '"><th colspan="2">' +
          '<button class="btn-x" title="tombstone topic on this node" data-tombstone="' + esc(t.topic_name) + '">✘</button> ' +
          '<a href="' + url(tp) + '" data-link>' + esc(t.topic_name) + '</a>' +
          (t.paused ? ' <span class="label label-primary">paused</span>' : '') + '</th>' +
          '<th class="num">Depth</th><th class="num">Memory + Disk</th><th class="num">Messages</th><th class="num">Channels</th><th colspan="4"></th></tr>' +
          '<tr data-topic="' + esc(t.topic_name) + '"><td colspan="2"></td>' + num('depth', t.depth) + '<td class="num">' + commafy(t.memory_depth) +
          ' + ' + commafy(t.backend_depth) + '</td>' + num('message_count', t.message_count) + num('channels', (t.channels || []).length) + '<td colspan="4"></td></tr>';
        var chans = t.channels || [];
        if (!chans.length) {
          html += '<tr><td></td><td colspan="9">' + notice('Messages will queue at the topic until a channel is created.') + '</td></tr>';
          return;
        }
        html += '<tr class="sub"><td></td><th>Channel</th><th class="num">Depth</th><th class="num">Memory + Disk</th><th class="num">In-Flight</th>' +
          '<th class="num">Deferred</th><th class="num">Requeued</th><th class="num">Timed Out</th><th class="num">Messages</th><th class="num">Connections</th></tr>';
        chans.forEach(function (c) {
          html += '<tr data-channel="' + esc(t.topic_name + '/' + c.channel_name) + '"><td></td><td><a href="' + url(tp + '/' + enc(c.channel_name)) + '" data-link>' +
            esc(c.channel_name) + '</a>' + (c.paused ? ' <span class="label label-primary">paused</span>' : '') + '</td>' +
            num('depth', c.depth) + '<td class="num">' + commafy(c.memory_depth) + ' + ' + commafy(c.backend_depth) + '</td>' +
            num('in_flight_count', c.in_flight_count) + num('deferred_count', c.deferred_count) + num('requeue_count', c.requeue_count) +
            num('timeout_count', c.timeout_count) + num('message_count', c.message_count) + num('client_count', c.client_count) + '</tr>';
          var clients = c.clients || [];
          if (!clients.length) {
            html += '<tr><td></td><td></td><td colspan="8">' + notice('No clients connected to this channel') + '</td></tr>';
            return;
          }
          html += '<tr class="sub"><td></td><td></td><th>Client Host</th><th>User-Agent</th><th>Attributes</th><th class="num">In-Flight</th>' +
            '<th class="num">Ready Count</th><th class="num">Requeued</th><th class="num">Finished</th><th class="num">Messages</th><th>Connected</th></tr>';
          clients.forEach(function (cl) {
            html += '<tr><td></td><td></td><td>' + clientHost(cl) + '</td><td>' + esc(cl.user_agent) + '</td><td>' + clientAttrs(cl) + '</td>' +
              num('in_flight_count', cl.in_flight_count) + num('ready_count', cl.ready_count) + num('requeue_count', cl.requeue_count) +
              num('finish_count', cl.finish_count) + num('message_count', cl.message_count) + '<td>' + esc(nanotohuman(cl.connected)) + '</td></tr>';
          });
        });
      });
      html += '</tbody></table></div>';
      main().innerHTML = html;
      main().querySelectorAll('[data-tombstone]').forEach(function (b) {
        b.addEventListener('click', function () {
          var topic = b.getAttribute('data-tombstone');
          confirmAction('Tombstone', topic + ' on ' + node).then(function (ok) {
            if (!ok) { return; }
            actionThen(api('DELETE', '/nodes/' + enc(node), { topic: topic }), render);
          });
        });
      });
    });
  }

  function counterView() {
    document.body.classList.add('counter-page');
    var token = viewToken;
    var html = '<div class="counter-box"><div id="counter" class="counter" data-total="0" aria-live="polite">0</div>' +
      '<div class="counter-caption">Messages Processed</div>' + chartsBox('counter-charts');
    if (graphsOn()) {
      var t = 'scale(sumSeries(' + metricKey(STATSD_PREFIX.replace(/%s/g, '*') + '.topic.*.channel.*.message_count') + '),' +
        (1 / STATSD_INTERVAL) + ')';
      html += '<img class="counter-graph" alt="" src="' + esc(GRAPHITE_URL + '/render?colorList=green&height=450&width=800&fgcolor=999999&from=-' +
        graphInterval() + '&until=-1min&target=' + enc(t)) + '">';
    }
    main().innerHTML = html + '</div>';
    var shown = null, target = 0, step = 0, lastPoll = 0, anim = null, delay = 100;
    function paint() {
      var c = document.getElementById('counter');
      if (c) {
        c.textContent = commafy(shown);
        c.setAttribute('data-total', String(Math.round(shown)));
      }
    }
    function animate() {
      if (token !== viewToken) { clearInterval(anim); return; }
      if (shown < target) { shown = Math.min(target, shown + step); paint(); }
    }
    function poll() {
      if (token !== viewToken) { return; }
      api('GET', '/counter').then(function (d) {
        if (token !== viewToken) { return; }
        clearAlerts();
        var total = 0;
        Object.keys(d.stats || {}).forEach(function (k) { total += d.stats[k].message_count; });
        var now = Date.now();
        if (shown === null) {
          shown = target = total;
          paint();
        } else if (total > target) {
          var secs = Math.max(0.001, (now - lastPoll) / 1000);
          step = Math.max(1, (total - shown) / secs / 50);
          target = total;
          if (!anim) { anim = setInterval(animate, 1000 / 60); }
        }
        lastPoll = now;
        if (d.message) { showWarning(d.message); }
        delay = delay < 10000 ? delay + 1000 : delay;
        setTimeout(poll, delay);
      }, function (e) {
        if (anim) { clearInterval(anim); anim = null; }
        showError(e.message);
        setTimeout(poll, 10000);
      });
    }
    poll();
    historyCharts('counter-charts', '', 'cluster');
  }

  function createForm() {
    if (!IS_ADMIN) { return ''; }
    return '<h3>Create Topic/Channel</h3><form id="create-form" class="create-form">' +
      '<label>Topic <input name="topic" id="create-topic" required maxlength="64" placeholder="topic name"></label>' +
      '<label>Channel <input name="channel" id="create-channel" maxlength="64" placeholder="optional channel name"></label>' +
      '<button class="btn btn-primary" type="submit">Create</button></form>' +
      '<p class="help">Creating a topic registers it with every nsqlookupd (or, without nsqlookupd, ' +
      'every configured nsqd); a channel is created on every nsqd producing the topic.</p>';
  }

  function wireCreate() {
    var f = document.getElementById('create-form');
    if (!f) { return; }
    f.addEventListener('submit', function (ev) {
      ev.preventDefault();
      var body = { topic: f.topic.value.trim(), channel: f.channel.value.trim() };
      actionThen(api('POST', '/topics', body), render);
    });
  }

  function lookupView() {
    if (!NSQLOOKUPD.length) {
      main().innerHTML = '<h2>Lookup</h2>' + notice('<strong>Notice</strong> nsqadmin is not configured with nsqlookupd hosts') + createForm();
      wireCreate();
      return;
    }
    load(api('GET', '/topics?inactive=true'), function (d) {
      var html = '<h2>Lookup</h2><div class="table-wrap"><table class="table" id="lookupd-hosts"><thead><tr><th>nsqlookupd Host</th></tr></thead><tbody>' +
        NSQLOOKUPD.map(function (h) { return '<tr><td>' + esc(h) + '</td></tr>'; }).join('') + '</tbody></table></div>';
      var topics = Object.keys(d.topics || {}).sort();
      if (!topics.length) {
        html += notice('No inactive Topics');
      } else {
        html += '<h3>Inactive Topics</h3><ul class="tree" id="inactive">' + topics.map(function (t) {
          return '<li><button class="btn-x" data-del-topic="' + esc(t) + '">✘</button> ' + esc(t) + '<ul>' +
            (d.topics[t] || []).map(function (c) {
              return '<li><button class="btn-x" data-del-topic="' + esc(t) + '" data-del-channel="' + esc(c) + '">✘</button> ' + esc(c) + '</li>';
            }).join('') + '</ul></li>';
        }).join('') + '</ul>';
      }
      main().innerHTML = html + createForm();
      wireCreate();
      main().querySelectorAll('[data-del-topic]').forEach(function (b) {
        b.addEventListener('click', function () {
          var t = b.getAttribute('data-del-topic');
          var c = b.getAttribute('data-del-channel');
          actionThen(api('DELETE', '/topics/' + enc(t) + (c ? '/' + enc(c) : '')), render);
        });
      });
    });
  }

  // The cluster's replication (ours; NSQ's nsqadmin has no such page): /api/replication lists
  // every nsqd with its /stats `replication` key (null when off, `error` when unreadable). A
  // table of the nodes, then one of the backlogs each node holds for the others (origins).
  function replicationView() {
    load(api('GET', '/replication'), function (d) {
      var nodes = d.nodes || [];
      var byId = Object.create(null);
      nodes.forEach(function (n) { if (n.replication) { byId[n.replication.node_id] = n; } });
      // A node ID as code, with the node it belongs to when one of the nodes has it.
      function idCell(id) {
        var n = byId[id];
        return '<code>' + esc(id) + '</code>' + (n ? ' ' + hostCell(n.node, n.hostname) : '');
      }
      var on = nodes.filter(function (n) { return n.replication; }).length;
      var html = '<h2>Replication</h2><p class="summary"><span data-field="nodes">' + commafy(nodes.length) +
        (nodes.length === 1 ? ' Node' : ' Nodes') + '</span>, <span data-field="replicating">' + commafy(on) + ' Replicating</span></p>';
      if (!nodes.length) {
        main().innerHTML = html + notice('No nsqd nodes found.');
        return;
      }
      if (!on) { html += notice('No node has replication on (see <code>--replication-peer</code>).'); }
      html += '<div class="table-wrap"><table class="table" id="replication-nodes"><thead><tr><th>NSQd Host</th>' +
        '<th>Node ID</th><th class="num">Epoch</th><th class="num">Replicas</th><th title="delivery of replicated messages stopped: no member heard this node lately, or one claims its epoch">Fenced</th><th>Replica Set</th>' +
        '<th class="num" title="replication peers linked / listed">Peers Up</th>' +
        '<th class="num" title="frames of this node\'s log its peers have not acknowledged, the most of any peer">Max Lag</th>' +
        '<th class="num" title="publishes waiting for replica acknowledgements">Pub. Waiting</th>' +
        '<th class="num" title="publishes failed for want of replica acknowledgements">Pub. Failed</th>' +
        '<th class="num">Takeovers</th></tr></thead><tbody>';
      var backlogs = [];
      nodes.forEach(function (n) {
        var r = n.replication;
        html += '<tr data-node="' + esc(n.node) + '"><td>' + hostCell(n.node, n.hostname) + '</td>';
        if (n.error) {
          html += '<td colspan="10" data-field="state"><span class="label label-danger">error</span> ' + esc(n.error) + '</td></tr>';
          return;
        }
        if (!r) {
          html += '<td colspan="10" data-field="state"><span class="label label-default">off</span></td></tr>';
          return;
        }
        var peers = r.peers || [];
        var connected = peers.filter(function (p) { return p.state === 'connected'; }).length;
        var lag = peers.reduce(function (m, p) { return Math.max(m, p.lag_frames || 0); }, 0);
        var set = peers.filter(function (p) { return p.in_replica_set; }).map(function (p) {
          var peer = byId[p.node_id];
          return peer ? '<a href="' + url('/nodes/' + enc(peer.node)) + '" data-link title="' + esc(p.node_id) + '">' + esc(p.address) + '</a>'
            : esc(p.address);
        });
        var fenced = r.fenced === undefined ? '' : r.fenced ? '<span class="label label-danger">yes</span>' : 'no';
        html += '<td data-field="node_id"><code>' + esc(r.node_id) + '</code></td>' + num('epoch', r.epoch) + num('replicas', r.replicas) +
          '<td data-field="fenced">' + fenced + '</td><td data-field="replica_set">' + (set.length ? set.join(', ') : '–') + '</td>' +
          '<td class="num" data-field="peers">' + connected + ' / ' + peers.length + '</td>' + num('lag_frames', lag) +
          num('publish_waiting', r.publish_waiting) + num('publish_failures', r.publish_failures) + num('takeovers', r.takeovers) + '</tr>';
        (r.backlogs || []).forEach(function (b) { backlogs.push([n, b]); });
      });
      html += '</tbody></table></div><h3>Replica Backlogs</h3>';
      if (!backlogs.length) {
        html += notice('No node holds a replica backlog.');
      } else {
        html += '<div class="table-wrap"><table class="table" id="replication-backlogs"><thead><tr><th>Held By</th><th>Origin</th>' +
          '<th class="num">Epoch</th><th>State</th><th class="num">Messages</th><th class="num">Bytes</th><th class="num">Last Seq</th></tr></thead><tbody>';
        backlogs.forEach(function (x) {
          var n = x[0], b = x[1];
          html += '<tr data-holder="' + esc(n.node) + '" data-origin="' + esc(b.origin + '.' + b.epoch) + '"><td>' + hostCell(n.node, n.hostname) + '</td>' +
            '<td data-field="origin">' + idCell(b.origin) + '</td>' + num('epoch', b.epoch) + '<td data-field="state">' + esc(b.state) + '</td>' +
            num('messages', b.messages) + num('bytes', b.bytes) + num('last_seq', b.last_seq) + '</tr>';
        });
        html += '</tbody></table></div>';
      }
      main().innerHTML = html;
    });
  }

  // ---- router ---------------------------------------------------------------------------------

  function route() {
    var p = location.pathname;
    if (BASE && p.indexOf(BASE) === 0) { p = p.slice(BASE.length); }
    var parts = p.split('/').filter(function (x) { return x !== ''; }).map(decodeURIComponent);
    if (parts.length === 0) { return ['topics']; }
    if (parts[0] === 'topics' && parts.length === 2) { return ['topic', parts[1]]; }
    if (parts[0] === 'topics' && parts.length === 3) { return ['channel', parts[1], parts[2]]; }
    if (parts[0] === 'nodes' && parts.length === 1) { return ['nodes']; }
    if (parts[0] === 'nodes' && parts.length === 2) { return ['node', parts[1]]; }
    if (parts[0] === 'counter' && parts.length === 1) { return ['counter']; }
    if (parts[0] === 'lookup' && parts.length === 1) { return ['lookup']; }
    if (parts[0] === 'replication' && parts.length === 1) { return ['replication']; }
    return ['none'];
  }

  function render() {
    viewToken++;
    if (refreshTimer) { clearInterval(refreshTimer); refreshTimer = null; }
    document.body.classList.remove('counter-page');
    clearAlerts();
    var r = route();
    var nav = { topics: 'topics', topic: 'topics', channel: 'topics', nodes: 'nodes', node: 'nodes', counter: 'counter', lookup: 'lookup',
      replication: 'replication' }[r[0]];
    document.querySelectorAll('[data-nav]').forEach(function (a) {
      a.classList.toggle('active', a.getAttribute('data-nav') === nav);
    });
    document.title = 'nsqadmin' + (r[1] ? ' - ' + r.slice(1).join(' / ') : '');
    switch (r[0]) {
      case 'topics': return topicsView();
      case 'topic': return topicView(r[1]);
      case 'channel': return channelView(r[1], r[2]);
      case 'nodes': return nodesView();
      case 'node': return nodeView(r[1]);
      case 'counter': return counterView();
      case 'lookup': return lookupView();
      case 'replication': return replicationView();
      default: main().innerHTML = '';
    }
  }

  function navigate(href) {
    history.pushState({}, '', href);
    render();
    window.scrollTo(0, 0);
  }

  document.addEventListener('click', function (ev) {
    var a = ev.target.closest && ev.target.closest('a[data-link]');
    if (!a || ev.ctrlKey || ev.metaKey || ev.shiftKey || ev.button !== 0) { return; }
    ev.preventDefault();
    navigate(a.getAttribute('href'));
  });
  window.addEventListener('popstate', render);

  container.innerHTML = header();
  var sel = document.getElementById('graph-interval');
  if (sel) {
    sel.addEventListener('change', function () {
      localStorage.setItem('graph_interval', sel.value);
      render();
    });
  }
  render();
}());
