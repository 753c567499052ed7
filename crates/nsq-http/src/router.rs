//! The one router of every NSQ HTTP server, with julienschmidt/httprouter's behaviour (which
//! the reference uses; router.go, `ServeHTTP`): an exact match per method; otherwise, for a
//! method that has routes and a path other than `/`, a redirect (301 for GET, 307 for the
//! rest) to the path with its trailing slash toggled, or to the case-insensitive match of the
//! cleaned path; otherwise `OPTIONS` answers with `Allow`, another method that exists for the
//! path gets `405` with `Allow`, and anything else `404`.
//!
//! Patterns are `/`-separated segments where `:name` matches one non-empty segment. The router
//! decides ([`Router::route`]); the daemon renders the endpoints, and [`Route::fallback`] the
//! rest in the reference's v1 style.

use axum::http::{header, Method, StatusCode};

use crate::reply::{Reply, CT_TEXT};
use nsq_go::url;

/// A route table: method, pattern, endpoint.
#[derive(Debug, Clone)]
pub struct Router<E> {
    routes: Vec<(Method, String, E)>,
}

/// What [`Router::route`] decided for a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Route<E> {
    /// An exact match: the endpoint, the values of its `:params` in order, and the decoded
    /// request path.
    Found {
        endpoint: E,
        params: Vec<String>,
        path: String,
    },
    /// A redirect to the route's spelling of the path (query to be kept).
    Redirect { status: StatusCode, to: String },
    /// `OPTIONS` of a path that has routes.
    Options { allow: String },
    /// `405`: other methods exist for the path.
    MethodNotAllowed { allow: String },
    /// `404`.
    NotFound,
    /// `OPTIONS *`, which Go's server answers itself with an empty 200.
    OptionsStar,
    /// The path's `%` escapes are invalid: Go's server answers `400 Bad Request`.
    BadPath,
}

impl<E> Default for Router<E> {
    fn default() -> Self {
        Router { routes: Vec::new() }
    }
}

impl<E: Copy> Router<E> {
    pub fn new<I, P>(routes: I) -> Router<E>
    where
        I: IntoIterator<Item = (Method, P, E)>,
        P: Into<String>,
    {
        Router {
            routes: routes
                .into_iter()
                .map(|(m, p, e)| (m, p.into(), e))
                .collect(),
        }
    }

    /// Routes a request by method and raw (still escaped) path.
    pub fn route(&self, method: &Method, raw_path: &str) -> Route<E> {
        if method == Method::OPTIONS && raw_path == "*" {
            return Route::OptionsStar;
        }
        let Some(path) = url::decode_path(raw_path) else {
            return Route::BadPath;
        };
        if let Some((endpoint, params)) = self.lookup(method, &path) {
            return Route::Found {
                endpoint,
                params,
                path,
            };
        }
        if method != Method::CONNECT && path != "/" && self.has_method(method) {
            let status = if method == Method::GET {
                StatusCode::MOVED_PERMANENTLY
            } else {
                StatusCode::TEMPORARY_REDIRECT
            };
            let toggled = toggle_slash(&path);
            let to = if self.lookup(method, &toggled).is_some() {
                Some(toggled)
            } else {
                self.fixed_path(method, &path)
            };
            if let Some(to) = to {
                return Route::Redirect { status, to };
            }
        }
        if method == Method::OPTIONS {
            if let Some(allow) = self.allowed(&path, None) {
                return Route::Options { allow };
            }
        } else if let Some(allow) = self.allowed(&path, Some(method)) {
            return Route::MethodNotAllowed { allow };
        }
        Route::NotFound
    }

    fn has_method(&self, method: &Method) -> bool {
        self.routes.iter().any(|(m, _, _)| m == method)
    }

    /// The exact (case-sensitive) route for `method` and `path`, with its parameters.
    pub fn lookup(&self, method: &Method, path: &str) -> Option<(E, Vec<String>)> {
        self.routes
            .iter()
            .filter(|(m, _, _)| m == method)
            .find_map(|(_, pat, ep)| match_route(pat, path, false).map(|(_, p)| (*ep, p)))
    }

    /// httprouter's `findCaseInsensitivePath(CleanPath(path), true)`: a route of `method` that
    /// matches ignoring ASCII case, possibly with a trailing slash added or removed; its
    /// spelling of the static segments, the request's of the parameters.
    pub fn fixed_path(&self, method: &Method, path: &str) -> Option<String> {
        let clean = url::clean_path(path);
        let toggled = toggle_slash(&clean);
        let routes = || self.routes.iter().filter(|(m, _, _)| m == method);
        routes()
            .find_map(|(_, pat, _)| match_route(pat, &clean, true))
            .or_else(|| routes().find_map(|(_, pat, _)| match_route(pat, &toggled, true)))
            .map(|(p, _)| p)
    }

    /// httprouter's `allowed`: the other methods registered for `path`, plus `OPTIONS`,
    /// sorted and joined with `, `.
    pub fn allowed(&self, path: &str, req: Option<&Method>) -> Option<String> {
        let mut methods: Vec<&str> = Vec::new();
        for (m, pat, _) in &self.routes {
            if Some(m) != req
                && !methods.contains(&m.as_str())
                && match_route(pat, path, false).is_some()
            {
                methods.push(m.as_str());
            }
        }
        if methods.is_empty() {
            return None;
        }
        methods.push("OPTIONS");
        methods.sort_unstable();
        Some(methods.join(", "))
    }
}

impl<E> Route<E> {
    /// The reference's answer to everything but [`Route::Found`], which callers serve
    /// themselves: redirects as `http.Redirect`, `OPTIONS` as an empty 200 with `Allow`, `405`
    /// and `404` as v1 errors (`METHOD_NOT_ALLOWED` with `Allow`, `NOT_FOUND`; also `NOT_FOUND`
    /// if asked about a `Found`).
    pub fn fallback(&self, method: &Method, query: Option<&str>) -> Reply {
        match self {
            Route::Found { .. } | Route::NotFound => {
                Reply::error(StatusCode::NOT_FOUND, "NOT_FOUND")
            }
            Route::Redirect { status, to } => {
                Reply::redirect(*status, to, query, method == Method::GET)
            }
            Route::Options { allow } => {
                Reply::new(StatusCode::OK, "").with(header::ALLOW, allow.clone())
            }
            Route::MethodNotAllowed { allow } => {
                Reply::error(StatusCode::METHOD_NOT_ALLOWED, "METHOD_NOT_ALLOWED")
                    .with(header::ALLOW, allow.clone())
            }
            Route::OptionsStar => Reply::new(StatusCode::OK, ""),
            Route::BadPath => Reply::new(StatusCode::BAD_REQUEST, "400 Bad Request")
                .with(header::CONTENT_TYPE, CT_TEXT)
                .with(header::CONNECTION, "close"),
        }
    }
}

fn toggle_slash(p: &str) -> String {
    if p.len() > 1 && p.ends_with('/') {
        p[..p.len() - 1].to_string()
    } else {
        format!("{p}/")
    }
}

/// Matches `path` against a pattern; returns the canonical spelling and the parameters.
fn match_route(pattern: &str, path: &str, ignore_case: bool) -> Option<(String, Vec<String>)> {
    let mut ps = pattern.split('/');
    let mut xs = path.split('/');
    let mut params = Vec::new();
    let mut canon: Vec<&str> = Vec::new();
    loop {
        match (ps.next(), xs.next()) {
            (None, None) => break,
            (Some(p), Some(x)) => {
                if p.starts_with(':') {
                    if x.is_empty() {
                        return None;
                    }
                    params.push(x.to_string());
                    canon.push(x);
                } else if p == x || (ignore_case && p.eq_ignore_ascii_case(x)) {
                    canon.push(p);
                } else {
                    return None;
                }
            }
            _ => return None,
        }
    }
    Some((canon.join("/"), params))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    enum E {
        Ping,
        Config,
        Pprof,
        Symbol,
        Channel,
    }

    fn router() -> Router<E> {
        Router::new([
            (Method::GET, "/ping", E::Ping),
            (Method::GET, "/config/:opt", E::Config),
            (Method::PUT, "/config/:opt", E::Config),
            (Method::GET, "/debug/pprof/", E::Pprof),
            (Method::GET, "/debug/pprof/symbol", E::Symbol),
            (Method::POST, "/debug/pprof/symbol", E::Symbol),
            (Method::DELETE, "/api/topics/:topic/:channel", E::Channel),
        ])
    }

    #[test]
    fn matching_and_helpers() {
        let r = router();
        assert_eq!(r.lookup(&Method::GET, "/ping"), Some((E::Ping, vec![])));
        assert_eq!(
            r.lookup(&Method::PUT, "/config/x"),
            Some((E::Config, vec!["x".into()]))
        );
        assert_eq!(r.lookup(&Method::GET, "/config/"), None);
        assert_eq!(r.lookup(&Method::GET, "/config/a/b"), None);
        assert_eq!(
            r.lookup(&Method::DELETE, "/api/topics/t/c"),
            Some((E::Channel, vec!["t".into(), "c".into()]))
        );
        assert_eq!(r.fixed_path(&Method::GET, "/PING"), Some("/ping".into()));
        assert_eq!(
            r.fixed_path(&Method::GET, "/Config/Foo/"),
            Some("/config/Foo".into())
        );
        assert_eq!(
            r.fixed_path(&Method::GET, "/DEBUG/PPROF"),
            Some("/debug/pprof/".into())
        );
        assert_eq!(r.fixed_path(&Method::POST, "/PING"), None);
        assert_eq!(
            r.allowed("/ping", Some(&Method::POST)).as_deref(),
            Some("GET, OPTIONS")
        );
        assert_eq!(
            r.allowed("/config/x", None).as_deref(),
            Some("GET, OPTIONS, PUT")
        );
        assert_eq!(
            r.allowed("/debug/pprof/symbol", None).as_deref(),
            Some("GET, OPTIONS, POST")
        );
        assert_eq!(r.allowed("/nope", None), None);
    }

    #[test]
    fn decisions() {
        let r = router();
        assert_eq!(
            r.route(&Method::GET, "/config/a%20b"),
            Route::Found {
                endpoint: E::Config,
                params: vec!["a b".into()],
                path: "/config/a b".into()
            }
        );
        assert_eq!(
            r.route(&Method::GET, "/ping/"),
            Route::Redirect {
                status: StatusCode::MOVED_PERMANENTLY,
                to: "/ping".into()
            }
        );
        assert_eq!(
            r.route(&Method::PUT, "/CONFIG/x"),
            Route::Redirect {
                status: StatusCode::TEMPORARY_REDIRECT,
                to: "/config/x".into()
            }
        );
        assert_eq!(
            r.route(&Method::POST, "/ping"),
            Route::MethodNotAllowed {
                allow: "GET, OPTIONS".into()
            }
        );
        assert_eq!(
            r.route(&Method::OPTIONS, "/ping"),
            Route::Options {
                allow: "GET, OPTIONS".into()
            }
        );
        assert_eq!(r.route(&Method::OPTIONS, "*"), Route::OptionsStar);
        assert_eq!(r.route(&Method::GET, "/%zz"), Route::BadPath);
        assert_eq!(r.route(&Method::GET, "/nope"), Route::NotFound);
        assert_eq!(r.route(&Method::PATCH, "/nope/"), Route::NotFound);

        let reply = r
            .route(&Method::GET, "/PING")
            .fallback(&Method::GET, Some("a=1"));
        assert_eq!(reply.status, StatusCode::MOVED_PERMANENTLY);
        assert_eq!(reply.headers[0], (header::LOCATION, "/ping?a=1".into()));
        assert_eq!(
            &reply.body[..],
            b"<a href=\"/ping?a=1\">Moved Permanently</a>.\n\n"
        );
        let reply = r
            .route(&Method::POST, "/ping")
            .fallback(&Method::POST, None);
        assert_eq!(&reply.body[..], br#"{"message":"METHOD_NOT_ALLOWED"}"#);
        assert!(reply.has(&header::ALLOW));
    }
}
