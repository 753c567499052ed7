//! Go compatibility without I/O, for every NSQ binary in this workspace: what the reference's
//! users can see of Go's standard library and of the small Go libraries NSQ uses.
//!
//! * [`flag`]: a flag set with Go `flag` semantics and go-options' `--config` resolution.
//! * [`duration`]: `time.ParseDuration` and `Duration.String()`.
//! * [`strconv`]: `ParseBool`, `ParseInt`, `ParseFloat`, `%v` of floats.
//! * [`quote`]: `%q` (`strconv.Quote`).
//! * [`json`]: `encoding/json`'s exact bytes, and its decoder's syntax checking and error texts.
//! * [`url`]: `net/url` query parsing, path cleaning/escaping (httprouter and `http.Redirect`).
//! * [`lg`]: NSQ's log levels.
//! * [`os`]: `os.Hostname` and `*PathError` texts (the only file-system reads here).

pub mod duration;
pub mod flag;
pub mod json;
pub mod lg;
pub mod os;
pub mod quote;
pub mod strconv;
pub mod url;

pub use flag::{Flag, FlagError, FlagSet, ParseOutcome, Slot};
pub use lg::LogLevel;
