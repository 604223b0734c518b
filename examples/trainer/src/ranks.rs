//! Job protocol version 2: one process per rank, training data-parallel over
//! plain TCP (no collective library: a CPU trainer with a few ranks needs
//! none, and it keeps the example free of heavy dependencies).
//!
//! Rank 0 is the hub. It listens on `0.0.0.0:MASTER_PORT`; every other rank
//! connects to `MASTER_ADDR:MASTER_PORT` (retrying, since ranks start in any
//! order) and says who it is. Rank 0 then sends every worker the initial
//! parameters and step (its own, from its `resume.safetensors`: a checkpoint
//! on one node only must not split the gang). At every step each worker
//! sends its gradient sum, sample count and stop flag; rank 0 adds them to
//! its own and sends the total back with a [`Control`] word, and every rank
//! applies the same update, so that the weights stay bit-identical.
//!
//! Wire format, all integers and floats little-endian:
//!
//! - hello (worker to rank 0): `b"HDR2"`, rank `u32`, world size `u32`,
//!   parameter count `u32`;
//! - every later message is a frame: a tag `u8`, a word `u64`, then one
//!   `f32` per parameter:
//!   - start (rank 0 to worker): [`Control`], the step, the parameters;
//!   - step (worker to rank 0): stop flag (0 or 1), local samples, the sum
//!     of the local examples' gradients;
//!   - reply (rank 0 to worker): [`Control`], the samples of all ranks, the
//!     sum of all ranks' gradient sums (added in rank order).
//!
//! The mean gradient is `sum / samples`, i.e. `Σ n_i g_i / Σ n_i` with `g_i`
//! rank `i`'s mean: weighted by samples, not averaged over ranks, so that
//! uneven batch shares give the gradient of one batch of `Σ n_i` examples.

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// The first bytes of a hello: a stray connection is refused, not misread.
const MAGIC: [u8; 4] = *b"HDR2";
/// Default bound on the wait for all ranks to meet (`HADAR_TRAINER_CONNECT_S`).
pub const CONNECT_S: f64 = 60.0;
/// Default bound on the wait for one message (`HADAR_TRAINER_PEER_TIMEOUT_S`).
pub const PEER_TIMEOUT_S: f64 = 120.0;
/// Pause between two tries to reach rank 0, or two looks for a new peer.
const RETRY: Duration = Duration::from_millis(100);

/// This process's place in the gang: the torchrun variables and the knobs.
#[derive(Debug, Clone, PartialEq)]
pub struct Place {
    /// `RANK`.
    pub rank: u32,
    /// `WORLD_SIZE`.
    pub world: u32,
    /// `MASTER_ADDR` (workers only; rank 0 listens on every address).
    pub addr: String,
    /// `MASTER_PORT`.
    pub port: u16,
    /// `HADAR_BATCH_SHARE`: this rank's share of the global batch.
    pub share: f64,
    /// How long ranks wait for each other to meet.
    pub connect: Duration,
    /// How long a rank waits for one message before it gives its peer up.
    pub peer_timeout: Duration,
}

impl Place {
    /// From the environment (`var` looks a variable up); `None` for one
    /// process (`WORLD_SIZE` absent or 1), which trains as protocol 1 does.
    pub fn from_env(var: impl Fn(&str) -> Option<String>) -> Result<Option<Self>, String> {
        let vars = Vars(var);
        let world: u32 = vars.parse("WORLD_SIZE", Some(1))?;
        if world == 0 {
            return Err("WORLD_SIZE=0: a task has at least one rank".into());
        }
        if world == 1 {
            return Ok(None);
        }
        let rank: u32 = vars.parse("RANK", None)?;
        if rank >= world {
            return Err(format!("RANK={rank} is not below WORLD_SIZE={world}"));
        }
        let port: u16 = vars.parse("MASTER_PORT", None)?;
        // Rank 0 listens on every address: it needs no MASTER_ADDR.
        let addr = vars.parse("MASTER_ADDR", (rank == 0).then(String::new))?;
        let share = vars.parse("HADAR_BATCH_SHARE", Some(1.0 / f64::from(world)))?;
        if port == 0 {
            return Err("MASTER_PORT=0: rank 0 needs a port its peers can know".into());
        }
        if !(share > 0.0 && share <= 1.0) {
            return Err(format!("HADAR_BATCH_SHARE={share} is not in (0, 1]"));
        }
        Ok(Some(Self {
            rank,
            world,
            addr,
            port,
            share,
            connect: vars.seconds("HADAR_TRAINER_CONNECT_S", CONNECT_S)?,
            peer_timeout: vars.seconds("HADAR_TRAINER_PEER_TIMEOUT_S", PEER_TIMEOUT_S)?,
        }))
    }

    /// This rank's minibatch: its share of the `global` one, at least one.
    pub fn local_batch(&self, global: usize) -> usize {
        ((global as f64 * self.share).round() as usize).max(1)
    }

    /// Mixed into this rank's data-order seed, so that ranks draw different
    /// examples (0 for rank 0).
    pub fn seed_salt(&self) -> u64 {
        u64::from(self.rank).wrapping_mul(0x9E37_79B9_7F4A_7C15)
    }
}

/// The environment, looked up through a function (tests pass a map).
struct Vars<F>(F);

impl<F: Fn(&str) -> Option<String>> Vars<F> {
    /// `name`'s value parsed, else `default`; an error if neither.
    fn parse<T: std::str::FromStr>(&self, name: &str, default: Option<T>) -> Result<T, String> {
        match (self.0)(name).filter(|v| !v.is_empty()) {
            Some(v) => v
                .parse()
                .map_err(|_| format!("{name}={v:?} is not a valid value")),
            None => default.ok_or_else(|| format!("{name} is not set (WORLD_SIZE > 1 needs it)")),
        }
    }

    /// A positive number of seconds.
    fn seconds(&self, name: &str, default: f64) -> Result<Duration, String> {
        let s: f64 = self.parse(name, Some(default))?;
        if !(s.is_finite() && s > 0.0) {
            return Err(format!("{name}={s} is not a positive number of seconds"));
        }
        Ok(Duration::from_secs_f64(s))
    }
}

/// What rank 0 tells every rank with a step's total (or with the start).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Control {
    /// Apply the update and go on.
    Continue = 0,
    /// Apply and go on; rank 0 writes a checkpoint now (the round's
    /// deadline passed).
    Checkpoint = 1,
    /// Apply, then stop (a rank was signalled): every rank stops at the
    /// same step, none alone, or its peers would wait for it in vain.
    Stop = 2,
    /// Apply, then stop: the job's total is reached.
    Done = 3,
}

impl Control {
    fn from_tag(tag: u8) -> Option<Self> {
        [Self::Continue, Self::Checkpoint, Self::Stop, Self::Done]
            .into_iter()
            .find(|c| *c as u8 == tag)
    }

    /// Whether the ranks stop after this step.
    pub fn ends(self) -> bool {
        matches!(self, Self::Stop | Self::Done)
    }
}

/// A peer that closed its connection, sent garbage or went silent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lost {
    /// The rank lost.
    pub rank: u32,
    /// What happened.
    pub why: String,
}

impl std::fmt::Display for Lost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "lost rank {}: {}", self.rank, self.why)
    }
}

impl std::error::Error for Lost {}

/// Why an I/O operation with a peer failed, in words.
fn why(e: &std::io::Error, timeout: Duration) -> String {
    match e.kind() {
        ErrorKind::UnexpectedEof => "connection closed".into(),
        ErrorKind::WouldBlock | ErrorKind::TimedOut => {
            format!("no word for {:.1} s (hung or dead?)", timeout.as_secs_f64())
        }
        _ => e.to_string(),
    }
}

/// No Nagle delay (a step is one small message each way, latency is all
/// that matters) and bounded waits, so that a hung peer fails its gang
/// instead of hanging it.
fn configure(stream: &TcpStream, timeout: Duration) -> std::io::Result<()> {
    stream.set_nonblocking(false)?;
    stream.set_nodelay(true)?;
    stream.set_read_timeout(Some(timeout))?;
    stream.set_write_timeout(Some(timeout))
}

/// Writes one frame: tag, word, floats.
fn write_frame(stream: &mut TcpStream, tag: u8, word: u64, floats: &[f32]) -> std::io::Result<()> {
    let mut buf = Vec::with_capacity(9 + 4 * floats.len());
    buf.push(tag);
    buf.extend_from_slice(&word.to_le_bytes());
    buf.extend(floats.iter().flat_map(|f| f.to_le_bytes()));
    // One write: with no Nagle delay, a frame leaves at once.
    stream.write_all(&buf)
}

/// Reads one frame into `floats` (whose length is the parameter count both
/// ends agreed on at the hello); returns its tag and word.
fn read_frame(stream: &mut TcpStream, floats: &mut [f32]) -> std::io::Result<(u8, u64)> {
    let mut buf = vec![0u8; 9 + 4 * floats.len()];
    stream.read_exact(&mut buf)?;
    let mut word = [0u8; 8];
    word.copy_from_slice(&buf[1..9]);
    for (f, c) in floats.iter_mut().zip(buf[9..].chunks_exact(4)) {
        *f = f32::from_le_bytes([c[0], c[1], c[2], c[3]]);
    }
    Ok((buf[0], u64::from_le_bytes(word)))
}

fn u32_at(bytes: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]])
}

/// Rank 0's side: a connection to every other rank, in rank order.
#[derive(Debug)]
pub struct Leader {
    peers: Vec<(u32, TcpStream)>,
    world: u32,
    timeout: Duration,
}

impl Leader {
    /// Listens on `0.0.0.0:port` until every other rank has said hello, for
    /// at most `place.connect`; a stop signal (`stop`) ends the wait early
    /// with the peers met so far (then [`Leader::complete`] is false).
    pub fn meet(place: &Place, params: usize, stop: &AtomicBool) -> Result<Self, String> {
        let listener = TcpListener::bind(("0.0.0.0", place.port))
            .and_then(|l| l.set_nonblocking(true).map(|()| l))
            .map_err(|e| format!("rank 0: cannot listen on port {}: {e}", place.port))?;
        let mut leader = Self {
            peers: Vec::new(),
            world: place.world,
            timeout: place.peer_timeout,
        };
        let deadline = Instant::now() + place.connect;
        while !leader.complete() && !stop.load(Ordering::Relaxed) {
            match listener.accept() {
                Ok((stream, from)) => leader.admit(stream, from, params)?,
                Err(e) if e.kind() == ErrorKind::WouldBlock => {
                    if Instant::now() >= deadline {
                        return Err(leader.missing(place));
                    }
                    std::thread::sleep(RETRY);
                }
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return Err(format!("rank 0: accept on port {}: {e}", place.port)),
            }
        }
        leader.peers.sort_by_key(|(rank, _)| *rank);
        Ok(leader)
    }

    /// Whether every rank has met.
    pub fn complete(&self) -> bool {
        self.peers.len() + 1 == self.world as usize
    }

    /// Reads a newcomer's hello and keeps it if it is a rank of this gang
    /// that has not met yet. A connection that is no trainer rank (closed
    /// at once, or another magic: a port scan) is dropped, and the wait
    /// goes on; a rank of another shape is an error.
    fn admit(
        &mut self,
        mut stream: TcpStream,
        from: SocketAddr,
        params: usize,
    ) -> Result<(), String> {
        let mut hello = [0u8; 16];
        let read = configure(&stream, self.timeout).and_then(|()| stream.read_exact(&mut hello));
        let stray = match read {
            Err(e) => Some(why(&e, self.timeout)),
            Ok(()) if hello[..4] != MAGIC => Some("not a hadar-trainer rank".to_string()),
            Ok(()) => None,
        };
        if let Some(stray) = stray {
            eprintln!("hadar-trainer: rank 0: dropped the connection from {from}: {stray}");
            return Ok(());
        }
        let (rank, world, theirs) = (u32_at(&hello, 4), u32_at(&hello, 8), u32_at(&hello, 12));
        let problem = if world != self.world {
            format!("says WORLD_SIZE={world}, rank 0 has {}", self.world)
        } else if rank == 0 || rank >= world {
            format!("says RANK={rank}, not a worker rank of {world}")
        } else if self.peers.iter().any(|(r, _)| *r == rank) {
            format!("says RANK={rank}, which another peer already is")
        } else if theirs as usize != params {
            format!("trains {theirs} parameters, rank 0 {params} (same HADAR_TRAINER_MODEL?)")
        } else {
            self.peers.push((rank, stream));
            return Ok(());
        };
        Err(format!("rank 0: the peer at {from} {problem}"))
    }

    /// The error when the wait to meet is over: which ranks never came.
    fn missing(&self, place: &Place) -> String {
        let missing: Vec<String> = (1..self.world)
            .filter(|r| !self.peers.iter().any(|(p, _)| p == r))
            .map(|r| r.to_string())
            .collect();
        format!(
            "rank 0: no hello from rank(s) {} on port {} within {:.1} s \
             (HADAR_TRAINER_CONNECT_S)",
            missing.join(", "),
            place.port,
            place.connect.as_secs_f64()
        )
    }

    /// Sends every peer met the first step's control, the step and the
    /// parameters every rank starts from.
    pub fn start(&mut self, control: Control, step: u64, params: &[f32]) -> Result<(), Lost> {
        self.send(control, step, params)
    }

    /// Adds every worker's gradient sum to `sum` (rank 0's own), in rank
    /// order so that every run adds alike; returns the workers' samples and
    /// whether any of them was told to stop.
    pub fn gather(&mut self, sum: &mut [f32]) -> Result<(u64, bool), Lost> {
        let (mut samples, mut stop) = (0u64, false);
        let mut theirs = vec![0.0f32; sum.len()];
        for (rank, stream) in &mut self.peers {
            let lost = |why: String| Lost { rank: *rank, why };
            let (flag, n) =
                read_frame(stream, &mut theirs).map_err(|e| lost(why(&e, self.timeout)))?;
            if flag > 1 || n == 0 {
                return Err(lost(format!("bad step message (flag {flag}, samples {n})")));
            }
            for (s, t) in sum.iter_mut().zip(&theirs) {
                *s += t;
            }
            samples += n;
            stop |= flag == 1;
        }
        Ok((samples, stop))
    }

    /// Sends every worker the step's total and what to do after it.
    pub fn reply(&mut self, control: Control, samples: u64, sum: &[f32]) -> Result<(), Lost> {
        self.send(control, samples, sum)
    }

    fn send(&mut self, control: Control, word: u64, floats: &[f32]) -> Result<(), Lost> {
        for (rank, stream) in &mut self.peers {
            write_frame(stream, control as u8, word, floats).map_err(|e| Lost {
                rank: *rank,
                why: why(&e, self.timeout),
            })?;
        }
        Ok(())
    }
}

/// A worker's side: its connection to rank 0.
#[derive(Debug)]
pub struct Worker {
    stream: TcpStream,
    place: Place,
}

impl Worker {
    /// Connects to rank 0, retrying for at most `place.connect` (rank 0 may
    /// start after it), and says hello; `None` if a stop signal (`stop`)
    /// came first.
    pub fn meet(place: &Place, params: usize, stop: &AtomicBool) -> Result<Option<Self>, String> {
        let deadline = Instant::now() + place.connect;
        let mut stream = loop {
            if stop.load(Ordering::Relaxed) {
                return Ok(None);
            }
            match connect(place, deadline) {
                Ok(s) => break s,
                Err(e) if Instant::now() >= deadline => {
                    return Err(format!(
                        "rank {}: cannot reach rank 0 at {}:{} within {:.1} s \
                         (HADAR_TRAINER_CONNECT_S): {e}",
                        place.rank,
                        place.addr,
                        place.port,
                        place.connect.as_secs_f64()
                    ))
                }
                Err(_) => std::thread::sleep(RETRY),
            }
        };
        let mut hello = MAGIC.to_vec();
        for n in [place.rank, place.world, params as u32] {
            hello.extend_from_slice(&n.to_le_bytes());
        }
        configure(&stream, place.peer_timeout)
            .and_then(|()| stream.write_all(&hello))
            .map_err(|e| format!("rank {}: hello to rank 0: {e}", place.rank))?;
        Ok(Some(Self {
            stream,
            place: place.clone(),
        }))
    }

    /// Waits for rank 0's start: the parameters into `params`; returns the
    /// control word and the step.
    pub fn start(&mut self, params: &mut [f32]) -> Result<(Control, u64), Lost> {
        // Rank 0 sends it once the last rank has met, which may take up to
        // the whole connect bound.
        let patience = self.place.connect + self.place.peer_timeout;
        self.read(params, patience)
    }

    /// Sends this step's gradient sum of `samples` examples and the stop
    /// flag; `sum` becomes the sum of every rank's; returns what to do and
    /// the samples of all ranks.
    pub fn exchange(
        &mut self,
        stop: bool,
        samples: u64,
        sum: &mut [f32],
    ) -> Result<(Control, u64), Lost> {
        write_frame(&mut self.stream, u8::from(stop), samples, sum).map_err(|e| Lost {
            rank: 0,
            why: why(&e, self.place.peer_timeout),
        })?;
        // Twice the peer timeout: rank 0 waits for every worker in turn, and
        // when one hangs it should be rank 0 that gives up first and names
        // it, not this worker naming rank 0.
        self.read(sum, 2 * self.place.peer_timeout)
    }

    fn read(&mut self, floats: &mut [f32], patience: Duration) -> Result<(Control, u64), Lost> {
        let lost = |why: String| Lost { rank: 0, why };
        self.stream
            .set_read_timeout(Some(patience))
            .map_err(|e| lost(e.to_string()))?;
        let (tag, word) =
            read_frame(&mut self.stream, floats).map_err(|e| lost(why(&e, patience)))?;
        let control =
            Control::from_tag(tag).ok_or_else(|| lost(format!("bad control word {tag}")))?;
        Ok((control, word))
    }
}

/// One try to connect to rank 0 (every address `MASTER_ADDR` resolves to;
/// resolved again at every try, since a node's name may not resolve yet).
fn connect(place: &Place, deadline: Instant) -> std::io::Result<TcpStream> {
    let mut last = std::io::Error::new(ErrorKind::NotFound, "no address");
    for addr in (place.addr.as_str(), place.port).to_socket_addrs()? {
        let left = deadline.saturating_duration_since(Instant::now());
        match TcpStream::connect_timeout(&addr, left.clamp(RETRY, Duration::from_secs(5))) {
            Ok(s) => return Ok(s),
            Err(e) => last = e,
        }
    }
    Err(last)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn place_from(vars: &[(&str, &str)]) -> Result<Option<Place>, String> {
        let map: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Place::from_env(|k| map.get(k).cloned())
    }

    fn place(rank: u32, world: u32, port: u16) -> Place {
        Place {
            rank,
            world,
            addr: "127.0.0.1".into(),
            port,
            share: 1.0 / f64::from(world),
            connect: Duration::from_secs(20),
            peer_timeout: Duration::from_secs(20),
        }
    }

    fn free_port() -> u16 {
        let l = TcpListener::bind("127.0.0.1:0").expect("bind");
        l.local_addr().expect("addr").port()
    }

    #[test]
    fn one_process_has_no_place() {
        assert_eq!(place_from(&[]), Ok(None));
        assert_eq!(place_from(&[("WORLD_SIZE", "1"), ("RANK", "0")]), Ok(None));
        assert!(place_from(&[("WORLD_SIZE", "0")]).is_err());
    }

    #[test]
    fn a_rank_reads_its_place_with_defaults() {
        let vars = [("WORLD_SIZE", "4"), ("RANK", "0"), ("MASTER_PORT", "29500")];
        let p = place_from(&vars).expect("valid").expect("a gang");
        assert_eq!((p.rank, p.world, p.port, p.share), (0, 4, 29500, 0.25));
        assert_eq!(p.connect, Duration::from_secs(60));
        assert_eq!(p.peer_timeout, Duration::from_secs(120));
        assert_eq!(p.seed_salt(), 0);
        // A worker needs rank 0's address.
        let err = place_from(&[("WORLD_SIZE", "4"), ("RANK", "1"), ("MASTER_PORT", "1")]);
        assert!(err.expect_err("no address").contains("MASTER_ADDR"));
    }

    #[test]
    fn the_local_batch_is_the_share_rounded_and_at_least_one() {
        let mut p = place(1, 3, 1);
        for (share, batch) in [(0.5, 16), (0.3, 10), (0.2, 6), (0.001, 1), (1.0, 32)] {
            p.share = share;
            assert_eq!(p.local_batch(32), batch, "share {share}");
        }
    }

    /// A worker's raw hello.
    fn hello(port: u16, rank: u32, world: u32, params: u32) -> TcpStream {
        let mut s = TcpStream::connect(("127.0.0.1", port)).expect("connect");
        let mut h = MAGIC.to_vec();
        for n in [rank, world, params] {
            h.extend_from_slice(&n.to_le_bytes());
        }
        s.write_all(&h).expect("hello");
        s
    }

    /// Rank 0's error when the hellos of `ranks` arrive (world 3, 5 params).
    fn meet_error(ranks: &[u32]) -> String {
        let port = free_port();
        let leader = std::thread::spawn(move || {
            Leader::meet(&place(0, 3, port), 5, &AtomicBool::new(false))
        });
        let mut kept = Vec::new();
        for &r in ranks {
            // Retry until rank 0 listens.
            let deadline = Instant::now() + Duration::from_secs(20);
            while TcpStream::connect(("127.0.0.1", port)).is_err() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(20));
            }
            kept.push(hello(port, r, 3, 5));
        }
        let result = leader.join().expect("join");
        result.expect_err("refused")
    }

    #[test]
    fn duplicate_and_out_of_range_ranks_are_refused() {
        assert!(meet_error(&[1, 1]).contains("which another peer already is"));
        assert!(meet_error(&[3]).contains("not a worker rank of 3"));
        assert!(meet_error(&[0]).contains("not a worker rank of 3"));
    }

    #[test]
    fn a_step_adds_every_rank_and_carries_the_stop_flag() {
        let port = free_port();
        let leader = std::thread::spawn(move || {
            let mut l = Leader::meet(&place(0, 3, port), 2, &AtomicBool::new(false))?;
            l.start(Control::Continue, 7, &[0.5, -0.5])
                .map_err(|e| e.to_string())?;
            let mut sum = vec![1.0f32, 1.0];
            let (n, stop) = l.gather(&mut sum).map_err(|e| e.to_string())?;
            l.reply(Control::Stop, 4 + n, &sum)
                .map_err(|e| e.to_string())?;
            Ok::<_, String>((sum, n, stop))
        });
        let workers: Vec<_> = [(1u32, false, 2.0f32), (2, true, 3.0)]
            .into_iter()
            .map(|(r, stop, g)| {
                std::thread::spawn(move || {
                    let no = AtomicBool::new(false);
                    let mut w = Worker::meet(&place(r, 3, port), 2, &no)?.ok_or("stopped")?;
                    let mut params = [0.0f32; 2];
                    let start = w.start(&mut params).map_err(|e| e.to_string())?;
                    let mut sum = [g, 10.0 * g];
                    let reply = w.exchange(stop, u64::from(r), &mut sum);
                    Ok::<_, String>((start, params, reply.map_err(|e| e.to_string())?, sum))
                })
            })
            .collect();
        let (sum, n, stop) = leader.join().expect("join").expect("rank 0");
        assert_eq!((sum.clone(), n, stop), (vec![6.0, 51.0], 3, true));
        for w in workers {
            let (start, params, reply, theirs) = w.join().expect("join").expect("worker");
            assert_eq!((start, params), ((Control::Continue, 7), [0.5, -0.5]));
            assert_eq!((reply, theirs.to_vec()), ((Control::Stop, 7), sum.clone()));
        }
    }
}
