//! One topic's file logger (nsq's apps/nsq_to_file/file_logger.go, `FileLogger`): a writer
//! thread that appends each message body plus `\n` to the current file, rotates it (new
//! `<DATETIME>` bucket, `--rotate-interval`, `--rotate-size`), and a syncer thread that makes
//! the written bytes durable and only then FINs their messages.
//!
//! # Acknowledging only what is on disk
//!
//! The reference's `router` writes each message unbuffered, and when `--max-in-flight`
//! messages are pending (or the consumer is starved, or the `--sync-interval` ticks) it fsyncs
//! and FINs them, blocking the stream meanwhile. Here the writer buffers bodies and, at a
//! sync point, hands the batch (the file and its messages) to the syncer and goes on writing:
//! the syncer fsyncs (`fdatasync`; one call covers every batch queued behind it) and FINs the
//! batch. A message is never FINed before the bytes written for it were synced, so a SIGTERM,
//! SIGKILL or crash loses nothing nsqd considers finished; unfinished messages are requeued by
//! nsqd and may be written twice.
//!
//! Sync points are the reference's (`router`): the message that opens a file (the first one,
//! and the first after a rotation) is synced at once, then the `--sync-interval` tick,
//! `--max-in-flight` pending messages, rotation, SIGHUP and shutdown; between them messages
//! stay in flight, unFINed, as in the reference (up to a sync interval at a low rate). Under
//! load the syncer is also fed early — whenever one connection's unsubmitted messages reach
//! half of its share of `--max-in-flight`, or an eighth of it while the syncer is idle (group
//! commit, looked at again every few milliseconds while the syncer is busy, so the end of a
//! burst that came during a sync does not wait for the tick) — so receiving and writing the
//! next messages overlaps with syncing the previous ones (the reference syncs when a connection is "starved", at 85 % of its RDY, and then
//! stalls until the FINs are out). Finer splits measured no faster here: every sync point
//! costs thread wake-ups.
//!
//! With `--gzip`, the reference's syncs end the current gzip member and the next write
//! starts a new one, so files are multi-member gzip streams with a member per sync, as the
//! reference writes them; a sync whose messages were all written to the file a rotation
//! just closed, and closing a file whose last member is complete, write the empty member
//! Go's `gzip.Writer.Close` writes ([`empty_gzip_member`]). The early sync points under load
//! (above) do not end the member: they flush the deflate stream to a byte boundary
//! (`Z_SYNC_FLUSH`, an empty stored block of 4–5 bytes) so every byte written for the synced
//! messages is in the file, decodable by a streaming reader, before they are FINed; the tick
//! then ends the member. The deflate blocks themselves are flate2's, not Go's compress/flate
//! (Go ends each member's stream with an empty final stored block, 5 bytes more).

use std::fs::File;
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime};

use flate2::write::GzEncoder;
use flate2::Compression;
use nsq_client::Message;
use nsq_go::os::path_error;

use crate::filename::{dir_of, join, strftime, with_rev};
use crate::gzip_member::empty_gzip_member;
use crate::syncer::{sync_loop, SyncJob};

mod move_out;
use crate::{fatalf, logf};

/// Bytes buffered before they are written to the file (or the gzip encoder).
const WRITE_BUFFER: usize = 256 * 1024;

/// How soon pending messages are looked at again while the syncer is busy (an `fdatasync`
/// takes milliseconds): the writer wakes this often only while both hold.
const SYNCER_RECHECK: Duration = Duration::from_millis(2);

/// What a sync does to an open gzip member.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Member {
    /// End it (trailer written); the next write starts a new one.
    End,
    /// Flush its deflate stream to a byte boundary and keep it open.
    Flush,
}

/// The options every topic's logger shares.
#[derive(Debug, Clone)]
pub(crate) struct Settings {
    pub(crate) channel: String,
    pub(crate) output_dir: String,
    pub(crate) work_dir: String,
    pub(crate) datetime_format: String,
    /// `--gzip` with its level.
    pub(crate) gzip: Option<u32>,
    pub(crate) skip_empty_files: bool,
    pub(crate) rotate_size: i64,
    pub(crate) rotate_interval: Duration,
    pub(crate) sync_interval: Duration,
    pub(crate) max_in_flight: usize,
}

/// What a topic's writer thread is told.
pub(crate) enum Input {
    /// Messages in arrival order, and how many nsqd connections the consumer has now.
    Msgs(Vec<Message>, usize),
    /// SIGHUP: sync and close the current file.
    Hup,
    /// SIGINT/SIGTERM: the consumer is stopping; sync whatever arrives at once.
    Term,
    /// The consumer has stopped and delivered everything: sync, close, exit.
    Stopped,
}

/// Starts the writer (and its syncer) for `topic` with its file name template.
pub(crate) fn spawn(
    topic: String,
    template: String,
    settings: Arc<Settings>,
    rx: Receiver<Input>,
) -> JoinHandle<()> {
    std::thread::Builder::new()
        .name(format!("file-{topic}"))
        .spawn(move || Writer::new(topic, template, settings).run(rx))
        .unwrap_or_else(|e| fatalf!("cannot start a thread: {e}"))
}

/// `File` as `io::Write` through a shared handle (the syncer holds another).
struct FileSink(Arc<File>);

impl Write for FileSink {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        (&*self.0).write(buf)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The file being written.
struct Out {
    /// Its full name in the work dir.
    path: String,
    file: Arc<File>,
    /// The open gzip member, if any.
    gz: Option<GzEncoder<FileSink>>,
}

struct Writer {
    /// `[<topic>/<channel>]`, the log lines' prefix.
    label: String,
    s: Arc<Settings>,
    template: String,
    out: Option<Out>,
    /// Bodies not yet handed to the file or the encoder.
    buf: Vec<u8>,
    /// The current name (`<DATETIME>` filled in, `<REV>` not).
    filename: String,
    open_time: Instant,
    /// Bytes in the file, counted uncompressed.
    filesize: i64,
    rev: u64,
    /// Written, not yet handed to the syncer.
    pending: Vec<Message>,
    /// Per nsqd address: how many of `pending` came from it.
    per_conn: Vec<(String, usize)>,
    /// One of `pending` arrived while the syncer was busy: part of a burst, synced as soon
    /// as the syncer is free (`group_commit`) rather than at the tick.
    burst: bool,
    connections: usize,
    /// The `<DATETIME>` name of the last second it was computed for.
    name_cache: Option<(u64, String)>,
    syncer: Option<(Sender<SyncJob>, JoinHandle<()>)>,
    /// Set by the syncer while it waits for work.
    syncer_idle: Arc<AtomicBool>,
}

impl Writer {
    fn new(topic: String, template: String, s: Arc<Settings>) -> Writer {
        let (tx, rx) = std::sync::mpsc::channel::<SyncJob>();
        let label = format!("[{}/{}]", topic, s.channel);
        let syncer_idle = Arc::new(AtomicBool::new(true));
        let idle = syncer_idle.clone();
        let syncer = std::thread::Builder::new()
            .name(format!("sync-{topic}"))
            .spawn(move || sync_loop(rx, label, idle))
            .unwrap_or_else(|e| fatalf!("cannot start a thread: {e}"));
        Writer {
            label: format!("[{}/{}]", topic, s.channel),
            s,
            template,
            out: None,
            buf: Vec::with_capacity(WRITE_BUFFER + 64 * 1024),
            filename: String::new(),
            open_time: Instant::now(),
            filesize: 0,
            rev: 0,
            pending: Vec::new(),
            per_conn: Vec::new(),
            burst: false,
            connections: 1,
            name_cache: None,
            syncer: Some((tx, syncer)),
            syncer_idle,
        }
    }

    /// `router`: messages, ticks and signals until the consumer has stopped.
    fn run(mut self, rx: Receiver<Input>) {
        let interval = self.s.sync_interval;
        let mut next_tick = Some(Instant::now() + interval);
        let mut closing = false;
        loop {
            // While the syncer is busy with earlier messages, pending ones are looked at
            // again shortly (`group_commit`): the last arrivals of a burst must not wait for
            // the tick only because the syncer was busy when they came.
            let recheck = (!self.pending.is_empty() && !self.syncer_idle.load(Ordering::Acquire))
                .then(|| Instant::now() + SYNCER_RECHECK);
            let wake = match (next_tick, recheck) {
                (Some(t), Some(r)) => Some(t.min(r)),
                (t, r) => t.or(r),
            };
            let input = match wake {
                Some(at) => match rx.recv_timeout(at.saturating_duration_since(Instant::now())) {
                    Ok(i) => Some(i),
                    Err(RecvTimeoutError::Timeout) => None,
                    Err(RecvTimeoutError::Disconnected) => Some(Input::Stopped),
                },
                None => Some(rx.recv().unwrap_or(Input::Stopped)),
            };
            match input {
                None if next_tick.is_none_or(|t| Instant::now() < t) => {
                    self.group_commit(closing);
                }
                None => {
                    let now = Instant::now();
                    let mut at = next_tick.unwrap_or(now) + interval;
                    if at <= now {
                        at = now + interval;
                    }
                    next_tick = Some(at);
                    let mut close_file = false;
                    if self.needs_rotation() {
                        if self.s.skip_empty_files {
                            close_file = true;
                        } else {
                            self.update_file();
                        }
                    }
                    // The reference's `Sync` on the tick: the member ends here.
                    self.sync(Member::End);
                    if close_file {
                        self.close();
                    }
                }
                Some(Input::Msgs(msgs, connections)) => {
                    self.connections = connections.max(1);
                    for m in msgs {
                        self.write(m);
                    }
                    if !self.pending.is_empty() && !self.syncer_idle.load(Ordering::Acquire) {
                        self.burst = true;
                    }
                    self.group_commit(closing);
                }
                Some(Input::Hup) => {
                    self.sync(Member::End);
                    self.close();
                }
                Some(Input::Term) => {
                    // The reference stops its ticker and syncs; messages still arriving
                    // while the consumer stops are synced as they come, so the stop does
                    // not wait for them.
                    next_tick = None;
                    closing = true;
                    self.sync(Member::End);
                }
                Some(Input::Stopped) => {
                    self.sync(Member::End);
                    self.close();
                    break;
                }
            }
        }
        if let Some((tx, handle)) = self.syncer.take() {
            drop(tx);
            let _ = handle.join();
        }
    }

    fn label(&self) -> &str {
        &self.label
    }

    /// Group commit: between arrivals (and while the syncer works, every
    /// [`SYNCER_RECHECK`]), an idle syncer takes what is pending once it is worth a sync (an
    /// eighth of a connection's share) or is the rest of a burst (some of it arrived while
    /// the syncer was busy), so the stream need not wait for the half-share threshold nor a
    /// burst's tail for the tick; while the consumer stops, whatever arrives is synced at
    /// once. Messages arriving one by one at a low rate find the syncer idle and wait for
    /// the tick, as in the reference.
    fn group_commit(&mut self, closing: bool) {
        let share = (self.s.max_in_flight / self.connections).max(1);
        if closing
            || (self.syncer_idle.load(Ordering::Acquire)
                && (self.burst || self.per_conn.iter().any(|(_, n)| *n >= (share / 8).max(1))))
        {
            self.sync(Member::Flush);
        }
    }

    /// One message: rotate if needed, append body and `\n`, queue it for FIN.
    fn write(&mut self, m: Message) {
        // `router`: a message that opens a file (the first one, or after a rotation) is
        // synced at once, with whatever was pending (closing the old file synced their
        // bytes).
        let rotated = self.needs_rotation();
        if rotated {
            self.update_file();
        }
        self.buf.extend_from_slice(m.body());
        self.buf.push(b'\n');
        self.filesize += m.body().len() as i64 + 1;
        if self.buf.len() >= WRITE_BUFFER {
            self.drain_buf();
        }
        let share = (self.s.max_in_flight / self.connections).max(1);
        let threshold = (share / 2).max(1);
        let addr = m.nsqd_address();
        let count = match self.per_conn.iter_mut().find(|(a, _)| a == addr) {
            Some((_, n)) => {
                *n += 1;
                *n
            }
            None => {
                self.per_conn.push((addr.to_string(), 1));
                1
            }
        };
        self.pending.push(m);
        if rotated {
            self.sync(Member::End);
        } else if count >= threshold {
            self.sync(Member::Flush);
        } else if self.pending.len() >= self.s.max_in_flight {
            // The reference syncs when `--max-in-flight` messages are pending.
            self.sync(Member::End);
        }
    }

    /// Hands the buffered bytes to the file (or the gzip encoder).
    fn drain_buf(&mut self) {
        if self.buf.is_empty() {
            return;
        }
        let Some(out) = self.out.as_mut() else {
            self.buf.clear();
            return;
        };
        let r = match (self.s.gzip, out.gz.as_mut()) {
            (None, _) => FileSink(out.file.clone()).write_all(&self.buf),
            (Some(_), Some(gz)) => gz.write_all(&self.buf),
            (Some(level), None) => {
                let mut gz = GzEncoder::new(FileSink(out.file.clone()), Compression::new(level));
                let r = gz.write_all(&self.buf);
                out.gz = Some(gz);
                r
            }
        };
        if let Err(e) = r {
            fatalf!(
                "{} writing message to disk: {}",
                self.label,
                path_error("write", &out.path, &e)
            );
        }
        self.buf.clear();
    }

    /// Ends the open gzip member (writes its trailer).
    fn finish_member(&mut self) -> std::io::Result<()> {
        if let Some(out) = self.out.as_mut() {
            if let Some(gz) = out.gz.take() {
                gz.finish()?;
            }
        }
        Ok(())
    }

    /// The reference's `Sync` with gzip: it closes its gzip writer, which ends the member
    /// with data, or writes a member of its own with no data when nothing was written to it
    /// since it was opened — which happens when the pending messages were written to the
    /// file a rotation just closed (their bytes are synced already).
    fn end_member(&mut self) -> std::io::Result<()> {
        match (self.s.gzip, self.out.as_mut()) {
            (Some(level), Some(out)) if out.gz.is_none() => {
                FileSink(out.file.clone()).write_all(&empty_gzip_member(level))
            }
            _ => self.finish_member(),
        }
    }

    /// Flushes the open gzip member's deflate stream to a byte boundary (`Z_SYNC_FLUSH`):
    /// every byte given to the encoder is in the file, and the member stays open.
    fn flush_member(&mut self) -> std::io::Result<()> {
        if let Some(out) = self.out.as_mut() {
            if let Some(gz) = out.gz.as_mut() {
                gz.flush()?;
            }
        }
        Ok(())
    }

    /// `Sync` and the FINs after it: the pending messages go to the syncer with the file
    /// they were written to. `member` says whether an open gzip member ends here (the
    /// reference's sync points) or is only flushed (the early ones); a member with data
    /// ends at the tick even when nothing is pending, as each of the reference's members
    /// holds one sync interval.
    fn sync(&mut self, member: Member) {
        if self.pending.is_empty() {
            if member == Member::End {
                self.drain_buf();
                if let Err(e) = self.finish_member() {
                    fatalf!("{} failed syncing messages: {e}", self.label());
                }
            }
            return;
        }
        // file_logger.go, `router` (its sync points are fewer; see the module doc).
        logf!(
            Info,
            "{} syncing {} records to disk",
            self.label(),
            self.pending.len()
        );
        self.drain_buf();
        let r = match member {
            Member::End => self.end_member(),
            Member::Flush => self.flush_member(),
        };
        if let Err(e) = r {
            fatalf!("{} failed syncing messages: {e}", self.label());
        }
        let msgs = std::mem::take(&mut self.pending);
        self.per_conn.clear();
        self.burst = false;
        let Some(out) = self.out.as_ref() else {
            // Nothing open: nothing was written for them (cannot happen: writing opens).
            drop(msgs);
            return;
        };
        let job = SyncJob {
            file: out.file.clone(),
            path: out.path.clone(),
            msgs,
        };
        if let Some((tx, _)) = &self.syncer {
            let _ = tx.send(job);
        }
    }

    /// Brings the name for now (`<DATETIME>` filled in) up to date; it is computed at most
    /// once per second.
    fn refresh_name(&mut self) {
        let now = SystemTime::now();
        let sec = now
            .duration_since(SystemTime::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0);
        if self.name_cache.as_ref().is_some_and(|(s, _)| *s == sec) {
            return;
        }
        let zoned = jiff::Timestamp::try_from(now)
            .unwrap_or(jiff::Timestamp::UNIX_EPOCH)
            .to_zoned_datetime(jiff::tz::TimeZone::system());
        let name = self
            .template
            .replace("<DATETIME>", &strftime(&self.s.datetime_format, &zoned));
        self.name_cache = Some((sec, name));
    }

    /// `currentFilename`.
    fn current_filename(&mut self) -> String {
        self.refresh_name();
        self.name_cache
            .as_ref()
            .map(|(_, n)| n.clone())
            .unwrap_or_default()
    }

    /// `needsRotation`.
    fn needs_rotation(&mut self) -> bool {
        if self.out.is_none() {
            return true;
        }
        self.refresh_name();
        if let Some((_, name)) = &self.name_cache {
            if *name != self.filename {
                logf!(Info, "{} new filename {name}, rotating...", self.label());
                return true;
            }
        }
        if !self.s.rotate_interval.is_zero() {
            let s = self.open_time.elapsed();
            if s > self.s.rotate_interval {
                logf!(
                    Info,
                    "{} {} since last open, rotating...",
                    self.label(),
                    nsq_go::duration::format(s)
                );
                return true;
            }
        }
        if self.s.rotate_size > 0 && self.filesize > self.s.rotate_size {
            logf!(
                Info,
                "{} {} currently {} bytes (> {}), rotating...",
                self.label(),
                self.out.as_ref().map(|o| o.path.as_str()).unwrap_or(""),
                self.filesize,
                self.s.rotate_size
            );
            return true;
        }
        false
    }

    /// `updateFile`: close the current file and open the next one.
    fn update_file(&mut self) {
        self.close();
        let filename = self.current_filename();
        if filename != self.filename {
            self.rev = 0;
        } else {
            self.rev += 1;
        }
        self.filename = filename;
        self.open_time = Instant::now();

        let full = join(&self.s.work_dir, &self.filename);
        self.make_dir(&full);
        let moving = self.s.work_dir != self.s.output_dir;
        loop {
            let abs = with_rev(&full, self.rev);
            if moving {
                let out_name = self.output_name(&abs);
                self.make_dir(&out_name);
                match std::fs::metadata(&out_name) {
                    Ok(_) => {
                        logf!(
                            Warn,
                            "{} output file already exists: {out_name}",
                            self.label()
                        );
                        self.rev += 1;
                        continue;
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                    Err(e) => fatalf!(
                        "{} unable to stat output file {out_name}: {}",
                        self.label(),
                        path_error("stat", &out_name, &e)
                    ),
                }
            }
            let mut o = std::fs::OpenOptions::new();
            o.write(true).mode(0o666);
            if self.s.gzip.is_some() || !self.s.rotate_interval.is_zero() {
                o.create_new(true);
            } else {
                o.create(true).append(true);
            }
            let file = match o.open(&abs) {
                Ok(f) => f,
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                    logf!(Warn, "{} working file already exists: {abs}", self.label());
                    self.rev += 1;
                    continue;
                }
                Err(e) => fatalf!(
                    "{} unable to open {abs}: {}",
                    self.label(),
                    path_error("open", &abs, &e)
                ),
            };
            logf!(Info, "{} opening {abs}", self.label());
            let size = match file.metadata() {
                Ok(m) => m.len() as i64,
                Err(e) => fatalf!(
                    "{} unable to stat file {abs}: {}",
                    self.label(),
                    path_error("stat", &abs, &e)
                ),
            };
            self.filesize = size;
            if self.s.rotate_size > 0 && size > self.s.rotate_size {
                logf!(
                    Info,
                    "{} {abs} currently {size} bytes (> {}), rotating...",
                    self.label(),
                    self.s.rotate_size
                );
                self.rev += 1;
                continue;
            }
            self.out = Some(Out {
                path: abs,
                file: Arc::new(file),
                gz: None,
            });
            break;
        }
    }

    /// Where a finished file of the work dir goes: the same relative name in the output dir.
    fn output_name(&self, work_name: &str) -> String {
        let rel = work_name
            .strip_prefix(self.s.work_dir.as_str())
            .unwrap_or(work_name);
        join(&self.s.output_dir, rel)
    }

    /// `makeDirFromPath`: the directories of `path`, mode 0770.
    fn make_dir(&self, path: &str) {
        let dir = dir_of(path);
        if dir.is_empty() {
            return;
        }
        if let Err(e) = std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o770)
            .create(dir)
        {
            fatalf!(
                "{} unable to create dir: {}",
                self.label(),
                path_error("mkdir", dir.trim_end_matches('/'), &e)
            );
        }
    }

    /// `Close`: end gzip, fsync, close, FIN what was written to it, move it to the output dir.
    fn close(&mut self) {
        if self.out.is_none() {
            return;
        }
        self.drain_buf();
        // The reference always has a gzip writer open (one from `updateFile`, a fresh one after
        // every `Sync`), and `Close` closes it: a writer with unsynced data ends its member; a
        // fresh one, never written to, writes a member of its own with no data. So a file
        // synced before it is closed (rotation on the tick, SIGHUP, shutdown) ends with an
        // empty member.
        let open_member = self.out.as_ref().is_some_and(|o| o.gz.is_some());
        if let Err(e) = self.finish_member() {
            fatalf!("{} failed to close GZIP writer: {e}", self.label());
        }
        let Some(out) = self.out.take() else { return };
        if let (Some(level), false) = (self.s.gzip, open_member) {
            if let Err(e) = FileSink(out.file.clone()).write_all(&empty_gzip_member(level)) {
                fatalf!("{} failed to close GZIP writer: {e}", self.label());
            }
        }
        if let Err(e) = out.file.sync_all() {
            fatalf!(
                "{} failed to fsync output file: {}",
                self.label(),
                path_error("sync", &out.path, &e)
            );
        }
        // Everything written to the file is on disk now. Its pending messages stay pending:
        // the reference FINs them at the sync that follows every close (`router`).
        drop(out.file);
        if self.s.work_dir != self.s.output_dir {
            self.move_out(&out.path);
        }
    }
}
