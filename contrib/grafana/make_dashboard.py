#!/usr/bin/env python3
"""Writes contrib/grafana/nsq-rs.json, the Grafana dashboard of nsq-rs (stdlib only).

    python3 contrib/grafana/make_dashboard.py          # rewrite nsq-rs.json
    python3 contrib/grafana/make_dashboard.py --check  # exit 1 if nsq-rs.json is not what
                                                       # this script writes (CI)

Edit the panels here, not in the JSON. Every query uses only families that nsqd, nsqlookupd
and nsqadmin export (docs/metrics.md) and Prometheus' `up`; contrib/check_metrics.py checks
that. The dashboard expects the scrape jobs nsqd, nsqlookupd and nsqadmin
(contrib/prometheus/prometheus.yml); its Prometheus data source is chosen in the variable
$datasource.
"""

import json
import sys
from pathlib import Path

OUT = Path(__file__).with_name("nsq-rs.json")
DS = {"type": "prometheus", "uid": "${datasource}"}
RATE = "$__rate_interval"
NODE = 'job="nsqd", instance=~"$instance"'
TOPIC = NODE + ', topic=~"$topic"'
CHANNEL = TOPIC + ', channel=~"$channel"'

panels = []
next_id = 1
y = 0


def _id():
    global next_id
    next_id += 1
    return next_id - 1


def row(title):
    global y
    panels.append(
        {
            "type": "row",
            "id": _id(),
            "title": title,
            "collapsed": False,
            "gridPos": {"h": 1, "w": 24, "x": 0, "y": y},
            "panels": [],
        }
    )
    y += 1


def place(widths, height):
    """Yields gridPos for panels of the given widths laid left to right on the next line."""
    global y
    x = 0
    for w in widths:
        yield {"h": height, "w": w, "x": x, "y": y}
        x += w
    y += height


def targets(queries):
    return [
        {"datasource": DS, "expr": expr, "legendFormat": legend, "refId": chr(ord("A") + i)}
        for i, (expr, legend) in enumerate(queries)
    ]


def timeseries(pos, title, queries, unit="short", description="", stack=False):
    panels.append(
        {
            "type": "timeseries",
            "id": _id(),
            "title": title,
            "description": description,
            "datasource": DS,
            "gridPos": pos,
            "fieldConfig": {
                "defaults": {
                    "unit": unit,
                    "min": 0,
                    "custom": {
                        "drawStyle": "line",
                        "lineWidth": 1,
                        "fillOpacity": 10,
                        "showPoints": "never",
                        "stacking": {"mode": "normal" if stack else "none", "group": "A"},
                    },
                },
                "overrides": [],
            },
            "options": {
                "legend": {"displayMode": "table", "placement": "bottom", "calcs": ["lastNotNull", "max"]},
                "tooltip": {"mode": "multi", "sort": "desc"},
            },
            "targets": targets(queries),
        }
    )


def stat(pos, title, queries, mappings=None, thresholds=None, unit="short", description=""):
    panels.append(
        {
            "type": "stat",
            "id": _id(),
            "title": title,
            "description": description,
            "datasource": DS,
            "gridPos": pos,
            "fieldConfig": {
                "defaults": {
                    "unit": unit,
                    "mappings": mappings or [],
                    "thresholds": thresholds
                    or {"mode": "absolute", "steps": [{"color": "green", "value": None}]},
                    "color": {"mode": "thresholds"},
                },
                "overrides": [],
            },
            "options": {
                "colorMode": "background",
                "graphMode": "none",
                "justifyMode": "auto",
                "orientation": "auto",
                "textMode": "value_and_name",
                "reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
            },
            "targets": targets(queries),
        }
    )


UP_DOWN = [
    {"type": "value", "options": {"0": {"text": "DOWN", "color": "red"}, "1": {"text": "UP", "color": "green"}}}
]
OK_NOK = [
    {"type": "value", "options": {"0": {"text": "NOK", "color": "red"}, "1": {"text": "OK", "color": "green"}}}
]
RED_BELOW_1 = {"mode": "absolute", "steps": [{"color": "red", "value": None}, {"color": "green", "value": 1}]}

# ---- per-node health --------------------------------------------------------------------
row("Nodes")
p = place([6, 6, 6, 6], 4)
stat(next(p), "nsqd up", [('up{job="nsqd", instance=~"$instance"}', "{{instance}}")], UP_DOWN, RED_BELOW_1,
     description="Prometheus' scrape of each nsqd (up).")
stat(next(p), "nsqd health (/ping)", [(f"nsq_nsqd_healthy{{{NODE}}}", "{{instance}}")], OK_NOK, RED_BELOW_1,
     description="1 while /ping answers OK; 0 after a failed disk write (a full disk, an I/O error).")
stat(next(p), "nsqlookupd / nsqadmin up", [('up{job=~"nsqlookupd|nsqadmin"}', "{{job}} {{instance}}")],
     UP_DOWN, RED_BELOW_1)
stat(next(p), "nsqd registered with nsqlookupd", [('nsq_lookupd_producers{job="nsqlookupd"}', "{{instance}}")],
     description="Active nsqd each nsqlookupd knows (its /nodes).")
p = place([6, 6, 6, 6], 7)
timeseries(next(p), "TCP connections", [(f"nsq_nsqd_tcp_connections{{{NODE}}}", "{{instance}}")])
timeseries(next(p), "Topics and channels", [
    (f"nsq_nsqd_topics{{{NODE}}}", "{{instance}} topics"),
    (f"nsq_nsqd_channels{{{NODE}}}", "{{instance}} channels"),
])
timeseries(next(p), "Resident memory", [
    (f'process_resident_memory_bytes{{{NODE}}} or process_resident_memory_bytes{{job=~"nsqlookupd|nsqadmin"}}',
     "{{job}} {{instance}}"),
], unit="bytes")
timeseries(next(p), "CPU", [
    (f'rate(process_cpu_seconds_total{{{NODE}}}[{RATE}]) or rate(process_cpu_seconds_total{{job=~"nsqlookupd|nsqadmin"}}[{RATE}])',
     "{{job}} {{instance}}"),
], unit="percentunit", description="CPU seconds per second (1 = one core).")
p = place([8, 8, 8], 6)
timeseries(next(p), "Uptime", [(f"nsq_nsqd_uptime_seconds{{{NODE}}}", "{{instance}}")], unit="s")
timeseries(next(p), "Draining", [(f"nsq_nsqd_draining{{{NODE}}}", "{{instance}}")],
           description="1 while nsqd drains (SIGTERM with sigterm=drain).")
timeseries(next(p), "Open file descriptors", [
    (f'process_open_fds{{{NODE}}}', "{{instance}} open"),
    (f'process_max_fds{{{NODE}}}', "{{instance}} max"),
])

# ---- publish and delivery rates ----------------------------------------------------------
row("Publish and delivery")
p = place([8, 8, 8], 8)
timeseries(next(p), "Published messages / s, by topic", [
    (f"sum by (topic) (rate(nsq_topic_messages_total{{{TOPIC}}}[{RATE}]))", "{{topic}}"),
], unit="ops", stack=True)
timeseries(next(p), "Published bytes / s, by topic", [
    (f"sum by (topic) (rate(nsq_topic_message_bytes_total{{{TOPIC}}}[{RATE}]))", "{{topic}}"),
], unit="Bps", stack=True)
timeseries(next(p), "Delivered messages / s, by channel", [
    (f"sum by (topic, channel) (rate(nsq_channel_messages_total{{{CHANNEL}}}[{RATE}]))", "{{topic}}/{{channel}}"),
], unit="ops", stack=True,
    description="Messages sent to the channel's consumers (redeliveries after a requeue or timeout count again).")
p = place([12, 12], 7)
timeseries(next(p), "Published messages / s, by node", [
    (f"sum by (instance) (rate(nsq_topic_messages_total{{{TOPIC}}}[{RATE}]))", "{{instance}}"),
], unit="ops", stack=True)
timeseries(next(p), "Consumers, by channel", [
    (f"sum by (topic, channel) (nsq_channel_clients{{{CHANNEL}}})", "{{topic}}/{{channel}}"),
])

# ---- depth ---------------------------------------------------------------------------------
row("Depth")
p = place([12, 12], 8)
timeseries(next(p), "Topic depth (memory + disk)", [
    (f"sum by (topic) (nsq_topic_depth{{{TOPIC}}})", "{{topic}}"),
])
timeseries(next(p), "Topic disk depth", [
    (f"sum by (topic) (nsq_topic_backend_depth{{{TOPIC}}})", "{{topic}}"),
])
p = place([12, 12], 8)
timeseries(next(p), "Channel depth (memory + disk)", [
    (f"sum by (topic, channel) (nsq_channel_depth{{{CHANNEL}}})", "{{topic}}/{{channel}}"),
])
timeseries(next(p), "Channel disk depth", [
    (f"sum by (topic, channel) (nsq_channel_backend_depth{{{CHANNEL}}})", "{{topic}}/{{channel}}"),
])
p = place([8, 8, 8], 7)
timeseries(next(p), "In flight", [
    (f"sum by (topic, channel) (nsq_channel_in_flight{{{CHANNEL}}})", "{{topic}}/{{channel}}"),
])
timeseries(next(p), "Deferred", [
    (f"sum by (topic, channel) (nsq_channel_deferred{{{CHANNEL}}})", "{{topic}}/{{channel}}"),
])
timeseries(next(p), "Paused topics and channels", [
    (f"nsq_topic_paused{{{TOPIC}}} == 1", "{{instance}} {{topic}}"),
    (f"nsq_channel_paused{{{CHANNEL}}} == 1", "{{instance}} {{topic}}/{{channel}}"),
])

# ---- requeues and timeouts -------------------------------------------------------------------
row("Requeues and timeouts")
p = place([12, 12], 8)
timeseries(next(p), "Requeued / s", [
    (f"sum by (topic, channel) (rate(nsq_channel_requeued_total{{{CHANNEL}}}[{RATE}]))", "{{topic}}/{{channel}}"),
], unit="ops", description="REQ from consumers.")
timeseries(next(p), "Timed out / s", [
    (f"sum by (topic, channel) (rate(nsq_channel_timed_out_total{{{CHANNEL}}}[{RATE}]))", "{{topic}}/{{channel}}"),
], unit="ops", description="Messages not finished within the consumer's msg_timeout: redelivered.")

# ---- end-to-end latency ----------------------------------------------------------------------
row("End-to-end processing latency")
E2E = "Publish to FIN, over --e2e-processing-latency-window-time; only with --e2e-processing-latency-percentile."
p = place([12, 12], 8)
timeseries(next(p), "Channel e2e latency quantiles", [
    (f"max by (topic, channel, quantile) (nsq_channel_e2e_processing_latency_seconds{{{CHANNEL}}})",
     "{{topic}}/{{channel}} p{{quantile}}"),
], unit="s", description=E2E)
timeseries(next(p), "Topic e2e latency quantiles", [
    (f"max by (topic, quantile) (nsq_topic_e2e_processing_latency_seconds{{{TOPIC}}})", "{{topic}} p{{quantile}}"),
], unit="s", description=E2E)

# ---- replication -------------------------------------------------------------------------------
row("Replication")
p = place([8, 8, 8], 7)
timeseries(next(p), "Peer links up", [
    (f"nsq_nsqd_replication_peer_up{{{NODE}}}", "{{instance}} -> {{peer}}"),
], description="1 while the link from this node to the peer is connected (nodes with --replicas >= 2).")
timeseries(next(p), "Peer lag (frames not acknowledged)", [
    (f"nsq_nsqd_replication_peer_lag_frames{{{NODE}}}", "{{instance}} -> {{peer}}"),
])
timeseries(next(p), "Peers in the replica set", [
    (f"nsq_nsqd_replication_peer_in_set{{{NODE}}}", "{{instance}} -> {{peer}}"),
])
p = place([12, 12], 7)
timeseries(next(p), "Replica backlog held, messages", [
    (f"nsq_nsqd_replica_backlog_messages{{{NODE}}}", "{{instance}} holds {{origin}}"),
])
timeseries(next(p), "Replica backlog held, bytes on disk", [
    (f"nsq_nsqd_replica_backlog_bytes{{{NODE}}}", "{{instance}} holds {{origin}}"),
], unit="bytes", description="Capped per origin by --replication-max-backlog-bytes.")
p = place([6, 6, 6, 6], 7)
timeseries(next(p), "Publishes waiting for acknowledgements", [
    (f"nsq_nsqd_replication_publish_waiting{{{NODE}}}", "{{instance}}"),
])
timeseries(next(p), "Publish failures / s", [
    (f"rate(nsq_nsqd_replication_publish_failures_total{{{NODE}}}[{RATE}])", "{{instance}}"),
], unit="ops", description="Publishes failed for want of replica acknowledgements within --replication-ack-timeout.")
timeseries(next(p), "Takeovers", [
    (f"increase(nsq_nsqd_replication_takeovers_total{{{NODE}}}[{RATE}])", "{{instance}}"),
], description="Lost peers' backlogs this node took over.")
timeseries(next(p), "Catch-ups", [
    (f"increase(nsq_nsqd_replication_catchups_total{{{NODE}}}[{RATE}])", "{{instance}}"),
], description="Link sessions that began with a catch-up rather than resuming.")

# ---- nsqlookupd and nsqadmin -------------------------------------------------------------------
row("nsqlookupd and nsqadmin")
p = place([8, 8, 8], 7)
timeseries(next(p), "nsqlookupd registrations", [
    ('nsq_lookupd_topics{job="nsqlookupd"}', "{{instance}} topics"),
    ('nsq_lookupd_channels{job="nsqlookupd"}', "{{instance}} channels"),
    ('nsq_lookupd_tombstones{job="nsqlookupd"}', "{{instance}} tombstones"),
])
timeseries(next(p), "Producers per topic (nsqlookupd)", [
    ('max by (topic) (nsq_lookupd_topic_producers{job="nsqlookupd", topic=~"$topic"})', "{{topic}}"),
])
timeseries(next(p), "nsqadmin upstream requests / s", [
    (f'sum by (upstream) (rate(nsq_admin_upstream_requests_total{{job="nsqadmin"}}[{RATE}]))', "{{upstream}}"),
    (f'sum by (upstream, reason) (rate(nsq_admin_upstream_request_errors_total{{job="nsqadmin"}}[{RATE}]))',
     "{{upstream}} errors ({{reason}})"),
], unit="reqps")


def variable(name, label, query, include_all=True):
    return {
        "name": name,
        "label": label,
        "type": "query",
        "datasource": DS,
        "query": {"query": query, "refId": f"{name}-var"},
        "definition": query,
        "refresh": 2,
        "includeAll": include_all,
        "multi": True,
        "allValue": ".*",
        "current": {"selected": True, "text": ["All"], "value": ["$__all"]},
        "sort": 1,
    }


dashboard = {
    "__requires": [
        {"type": "grafana", "id": "grafana", "name": "Grafana", "version": "10.0.0"},
        {"type": "datasource", "id": "prometheus", "name": "Prometheus", "version": "1.0.0"},
        {"type": "panel", "id": "timeseries", "name": "Time series", "version": ""},
        {"type": "panel", "id": "stat", "name": "Stat", "version": ""},
    ],
    "uid": "nsq-rs",
    "title": "nsq-rs",
    "description": "nsqd, nsqlookupd and nsqadmin (nsq-rs): health, rates, depth, latency, replication. "
                   "Metrics: docs/metrics.md.",
    "tags": ["nsq", "nsq-rs"],
    "editable": True,
    "graphTooltip": 1,
    "schemaVersion": 38,
    "version": 1,
    "refresh": "30s",
    "time": {"from": "now-1h", "to": "now"},
    "timezone": "",
    "annotations": {"list": []},
    "links": [],
    "templating": {
        "list": [
            {"name": "datasource", "label": "Data source", "type": "datasource", "query": "prometheus",
             "current": {}, "hide": 0, "refresh": 1},
            variable("instance", "nsqd", 'label_values(nsq_nsqd_info{job="nsqd"}, instance)'),
            variable("topic", "Topic", 'label_values(nsq_topic_depth{job="nsqd", instance=~"$instance"}, topic)'),
            variable("channel", "Channel",
                     'label_values(nsq_channel_depth{job="nsqd", instance=~"$instance", topic=~"$topic"}, channel)'),
        ]
    },
    "panels": panels,
}

text = json.dumps(dashboard, indent=2, sort_keys=False) + "\n"
if sys.argv[1:] == ["--check"]:
    if OUT.read_text() != text:
        print(f"{OUT} is not what {Path(__file__).name} writes: run it", file=sys.stderr)
        sys.exit(1)
    print(f"{OUT.name}: up to date ({len(panels)} panels)")
else:
    OUT.write_text(text)
    print(f"wrote {OUT} ({len(panels)} panels)")
