//! The shared state of one nsqadmin (nsqadmin/nsqadmin.go, `NSQAdmin`): the options (replaced
//! at run time by `PUT /config`), the routes under `--base-path`, the notifier and the chart
//! history, held in an `Arc` by every request. Starting and stopping is `server.rs`.

use std::sync::Arc;

use parking_lot::RwLock;

use crate::client::HttpClient;
use crate::cluster::ClusterInfo;
use crate::history::History;
use crate::http::Routes;
use crate::notify::Notifier;
use crate::options::{AdminOptions, Cidr};

/// Shared state of a running nsqadmin.
pub struct Admin {
    /// The options; `PUT /config/<opt>` replaces them atomically (a short write lock, never
    /// held across an `.await`).
    pub(crate) opts: RwLock<Arc<AdminOptions>>,
    pub(crate) routes: Routes,
    pub base_path: String,
    pub cidr: Option<Cidr>,
    pub notifier: Notifier,
    pub history: Option<Arc<History>>,
    /// nsqadmin's host name (`via` in notifications).
    pub hostname: String,
}

impl Admin {
    pub fn opts(&self) -> Arc<AdminOptions> {
        self.opts.read().clone()
    }

    pub fn set_opts(&self, o: AdminOptions) {
        *self.opts.write() = Arc::new(o);
    }

    pub fn client(&self) -> HttpClient {
        let o = self.opts();
        HttpClient {
            connect_timeout: o.http_client_connect_timeout,
            request_timeout: o.http_client_request_timeout,
        }
    }

    /// The upstream view for one request (current lookupd/nsqd lists).
    pub fn cluster(&self) -> ClusterInfo {
        let o = self.opts();
        ClusterInfo {
            client: HttpClient {
                connect_timeout: o.http_client_connect_timeout,
                request_timeout: o.http_client_request_timeout,
            },
            lookupds: o.lookupd_http_addresses.clone(),
            nsqds: o.nsqd_http_addresses.clone(),
        }
    }
}
