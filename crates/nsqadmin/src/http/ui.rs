//! The UI shell (nsqadmin/http.go, `indexHandler` and `staticAssetHandler`): the index page rendered from the embedded template for every
//! UI route, the embedded static assets (or `--dev-static-dir`), `/ping`, and the Graphite
//! reverse proxy (nsqadmin/http.go, `graphiteHandler` proxy).

use std::sync::Arc;

use axum::http::{header, StatusCode};

use super::{Ctx, Endpoint, Reply, CT_TEXT};
use crate::admin::Admin;

/// The embedded asset set: name → bytes.
const ASSETS: &[(&str, &[u8])] = &[
    ("index.html", include_bytes!("../../static/index.html")),
    ("main.js", include_bytes!("../../static/main.js")),
    ("base.css", include_bytes!("../../static/base.css")),
    ("favicon.png", include_bytes!("../../static/favicon.png")),
];

pub(super) async fn handle(
    admin: &Arc<Admin>,
    ep: Endpoint,
    params: Vec<String>,
    ctx: Ctx,
) -> Reply {
    match ep {
        Endpoint::Ping => Reply::new(StatusCode::OK, "OK").with(header::CONTENT_TYPE, CT_TEXT),
        Endpoint::Index => index(admin, &ctx),
        Endpoint::Static => asset(admin, params.first().map(String::as_str).unwrap_or("")),
        Endpoint::Render => render_proxy(admin, &ctx).await,
        _ => Reply::error(StatusCode::NOT_FOUND, "NOT_FOUND"),
    }
}

/// A JS string literal (JSON escaping, with `<`/`>`/`&` escaped as Go's template does).
fn js_string(s: &str) -> String {
    String::from_utf8(crate::json::to_vec(s)).unwrap_or_else(|_| "\"\"".to_string())
}

fn index(admin: &Arc<Admin>, ctx: &Ctx) -> Reply {
    let o = admin.opts();
    let template = load_asset(admin, "index.html").unwrap_or_default();
    let template = String::from_utf8_lossy(&template);
    let base = &admin.base_path;
    let prefix = if base == "/" { "" } else { base.as_str() };
    let graphite = if o.proxy_graphite {
        "''".to_string()
    } else {
        js_string(&o.graphite_url)
    };
    let lookupds: String = o
        .lookupd_http_addresses
        .iter()
        .map(|a| format!("{},", js_string(a)))
        .collect();
    let history_ms = admin
        .history
        .as_ref()
        .map_or(0, |h| h.interval.as_millis() as u64);
    let page = template
        .replace("{{STATIC}}", &format!("{prefix}/static"))
        .replace("{{VERSION}}", crate::options::VERSION)
        .replace("{{GRAPHITE_URL}}", &graphite)
        .replace(
            "{{GRAPH_ENABLED}}",
            &(!o.graphite_url.is_empty()).to_string(),
        )
        .replace(
            "{{STATSD_COUNTER_FORMAT}}",
            &js_string(&o.statsd_counter_format),
        )
        .replace(
            "{{STATSD_GAUGE_FORMAT}}",
            &js_string(&o.statsd_gauge_format),
        )
        .replace(
            "{{STATSD_INTERVAL}}",
            &o.statsd_interval.as_secs().to_string(),
        )
        .replace("{{STATSD_PREFIX}}", &js_string(&o.statsd_prefix))
        .replace("{{NSQLOOKUPD}}", &lookupds)
        .replace(
            "{{IS_ADMIN}}",
            &super::api::is_admin(admin, ctx).to_string(),
        )
        .replace("{{BASE_PATH}}", &js_string(base))
        .replace("{{HISTORY_INTERVAL_MS}}", &history_ms.to_string());
    Reply::new(StatusCode::OK, page).with(header::CONTENT_TYPE, "text/html")
}

fn load_asset(admin: &Admin, name: &str) -> Option<Vec<u8>> {
    let dir = admin.opts().dev_static_dir.clone();
    if !dir.is_empty() {
        if name.contains('/') || name == ".." || name == "." {
            return None;
        }
        return std::fs::read(std::path::Path::new(&dir).join(name)).ok();
    }
    ASSETS
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, b)| b.to_vec())
}

fn content_type(name: &str) -> &'static str {
    match name.rsplit_once('.').map(|(_, e)| e) {
        Some("js") => "text/javascript; charset=utf-8",
        Some("css") => "text/css; charset=utf-8",
        Some("html") => "text/html; charset=utf-8",
        Some("png") => "image/png",
        Some("svg") => "image/svg+xml",
        Some("map") | Some("json") => "application/json",
        Some("woff") => "font/woff",
        Some("woff2") => "font/woff2",
        Some("ttf") => "font/ttf",
        Some("eot") => "application/vnd.ms-fontobject",
        _ => "application/octet-stream",
    }
}

fn asset(admin: &Admin, name: &str) -> Reply {
    match load_asset(admin, name) {
        Some(b) => Reply::new(StatusCode::OK, b).with(header::CONTENT_TYPE, content_type(name)),
        None => Reply::new(StatusCode::NOT_FOUND, "NOT_FOUND").with(header::CONTENT_TYPE, CT_TEXT),
    }
}

/// The Graphite proxy: `GET <base>/render?…` forwarded to the Graphite host (path and query kept).
async fn render_proxy(admin: &Arc<Admin>, ctx: &Ctx) -> Reply {
    let o = admin.opts();
    let Ok(g) = nsq_http::client::parse_url(&o.graphite_url) else {
        return Reply::new(StatusCode::BAD_GATEWAY, "");
    };
    // Scheme, user info and host of the Graphite URL; path and query of the request.
    let mut base = g;
    base.set_path("");
    base.set_query(None);
    base.set_fragment(None);
    let mut url = format!(
        "{}{}",
        base.as_str().trim_end_matches('/'),
        super::query::escape_path(&ctx.path)
    );
    if let Some(q) = &ctx.raw_query {
        url.push('?');
        url.push_str(q);
    }
    match admin.client().get(&url).await {
        Ok(r) => {
            let status = StatusCode::from_u16(r.status).unwrap_or(StatusCode::BAD_GATEWAY);
            let mut reply = Reply::new(status, r.body.clone());
            if let Some(ct) = r.header("content-type") {
                reply = reply.with(header::CONTENT_TYPE, ct.to_string());
            }
            reply
        }
        Err(e) => {
            tracing::error!("graphite proxy - {e}");
            Reply::new(StatusCode::BAD_GATEWAY, "")
        }
    }
}
