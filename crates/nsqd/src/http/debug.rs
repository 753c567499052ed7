//! `/debug/*` (nsqd/http.go, the `/debug/pprof` routes). The routes exist with the reference's methods so that
//! 404/405 behave the same; there is no Go runtime behind them, so: the pprof index explains
//! that, `cmdline` and `symbol` answer in Go's formats, profiles answer `501`, and
//! `setblockrate`/`freememory` keep the reference's observable answers (a `400` text for a bad
//! rate, otherwise its `500 INTERNAL_ERROR`).

use axum::extract::Request;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::Response;

use super::{plain, raw, set, v1_error, Endpoint, CT_HTML, CT_TEXT};
use nsq_go::url::Query;

const PROFILES: &[&str] = &["block", "goroutine", "heap", "profile", "threadcreate"];

pub(super) async fn handle(ep: Endpoint, req: Request) -> Response {
    match ep {
        Endpoint::PprofIndex => {
            let mut body = String::from(
                "<html>\n<head>\n<title>/debug/pprof/</title>\n</head>\n<body>\n/debug/pprof/<br>\n<br>\n\
                 This nsqd is not a Go program: Go runtime profiles are not available.<br>\n<br>\nProfiles:<br>\n<table>\n",
            );
            for p in PROFILES {
                body.push_str(&format!(
                    "<tr><td>-</td><td><a href=\"{p}?debug=1\">{p}</a></td></tr>\n"
                ));
            }
            body.push_str("</table>\n<a href=\"cmdline\">cmdline</a><br>\n</body>\n</html>\n");
            go_pprof(raw(StatusCode::OK, body), CT_HTML)
        }
        Endpoint::PprofCmdline => {
            let args: Vec<String> = std::env::args().collect();
            go_pprof(raw(StatusCode::OK, args.join("\0")), CT_TEXT)
        }
        // Go's answer to "do you have symbols?"; `0` tells pprof tools there are none.
        Endpoint::PprofSymbol => go_pprof(raw(StatusCode::OK, "num_symbols: 0\n"), CT_TEXT),
        Endpoint::PprofProfile(name) => {
            let body = format!("profile {name:?} is not available: this nsqd has no Go runtime\n");
            go_pprof(raw(StatusCode::NOT_IMPLEMENTED, body), CT_TEXT)
        }
        Endpoint::SetBlockRate => {
            // `req.FormValue("rate")`: parse errors of other pairs are ignored.
            let q = Query::parse_lenient(req.uri().query().unwrap_or(""));
            let rate = q.get("rate").unwrap_or("");
            match nsq_go::strconv::atoi(rate) {
                Err(e) => plain(StatusCode::BAD_REQUEST, format!("invalid block rate : {e}")),
                // There is no block profiler to configure; the reference's handler then
                // panics and its panic handler answers this.
                Ok(_) => v1_error(StatusCode::INTERNAL_SERVER_ERROR, "INTERNAL_ERROR"),
            }
        }
        // The reference answers this after returning memory to the OS (see module docs).
        Endpoint::FreeMemory => v1_error(StatusCode::INTERNAL_SERVER_ERROR, "INTERNAL_ERROR"),
        _ => v1_error(StatusCode::NOT_FOUND, "NOT_FOUND"),
    }
}

fn go_pprof(mut r: Response, content_type: &str) -> Response {
    set(&mut r, header::CONTENT_TYPE, content_type);
    r.headers_mut().insert(
        "x-content-type-options",
        HeaderValue::from_static("nosniff"),
    );
    r
}
