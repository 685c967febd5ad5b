//! DRAM: a command-level, event-driven controller for one channel of one
//! rank: a read queue and a write queue, per-bank state machines (ACT, PRE,
//! RD, WR; PREA and REF for all-bank refresh), and FR-FCFS or FCFS
//! scheduling of commands.
//!
//! Each queued request wants one command next: a column command (RD or WR)
//! when its row is open, an ACT when its bank is closed, a PRE when another
//! row is open. Every constraint (tRCD, tRAS, tRP, tRC, tRTP, tWR, tCCD_S/L,
//! tRRD_S/L, tFAW, tWTR_S/L, read-to-write turnaround, the data bus, one
//! command per clock, refresh) gives the first clock at which that command
//! may issue. The scheduler takes the earliest such clock; among the
//! commands that can issue then, FR-FCFS takes a row hit first, else the
//! oldest request's command. Nothing ticks: the controller jumps from one
//! command to the next, so idle clocks cost nothing.
//!
//! The queues are kept per bank, with a count of each bank's requests to
//! its open row, so a decision looks at each busy bank's oldest row hit and
//! oldest other request rather than at every queued request (every request
//! of one bank and kind waits for the same constraints): the same choice,
//! checked against the scan of every request in test builds.
//!
//! Requests arrive in non-decreasing time (the simulator replays one
//! stream). Commands are issued lazily: only up to the time of the next
//! arrival, or until a read someone waits on has its data.
//!
//! Not modelled: ranks and channels (one rank, one channel), per-bank or
//! same-bank refresh, power-down.

use crate::config::{DramConfig, PagePolicy, Scheduler, WritePolicy};
use serde::{Deserialize, Serialize};

const NO_ROW: u64 = u64::MAX;
const DONE_RING: usize = 4096;

/// A compiled address mapping.
#[derive(Clone, Debug)]
pub struct Mapping {
    line_shift: u32,
    co: (u32, u64),
    ba: (u32, u64),
    bg: (u32, u64),
    ro_shift: u32,
    banks_per_group: u32,
    xor: bool,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Field {
    Ro,
    Ba,
    Bg,
    Co,
}

impl Mapping {
    /// Checks a mapping string (`ro-ba-bg-co`): the four fields once each,
    /// `ro` first.
    pub fn parse(s: &str) -> Result<(), String> {
        Self::fields(s).map(|_| ())
    }

    fn fields(s: &str) -> Result<Vec<Field>, String> {
        let mut out = Vec::new();
        for p in s.split('-') {
            let f = match p {
                "ro" => Field::Ro,
                "ba" => Field::Ba,
                "bg" => Field::Bg,
                "co" => Field::Co,
                o => {
                    return Err(format!(
                        "'{s}': unknown field '{o}'; use ro, ba, bg, co separated by '-', ro first (e.g. ro-ba-bg-co)"
                    ))
                }
            };
            if out.contains(&f) {
                return Err(format!("'{s}': field '{p}' appears twice"));
            }
            out.push(f);
        }
        if out.len() != 4 || out[0] != Field::Ro {
            return Err(format!(
                "'{s}': name ro, ba, bg and co once each with ro first (e.g. ro-ba-bg-co)"
            ));
        }
        Ok(out)
    }

    /// Compiles `cfg.mapping` for lines of `line_bytes`.
    pub fn new(cfg: &DramConfig, line_bytes: u32) -> Result<Self, String> {
        let fields = Self::fields(&cfg.mapping)?;
        let line_shift = line_bytes.trailing_zeros();
        let width = |f: Field| match f {
            Field::Co => (cfg.row_bytes / line_bytes).trailing_zeros(),
            Field::Ba => cfg.banks_per_group.trailing_zeros(),
            Field::Bg => cfg.bank_groups.trailing_zeros(),
            Field::Ro => 0,
        };
        let mut m = Mapping {
            line_shift,
            co: (0, 0),
            ba: (0, 0),
            bg: (0, 0),
            ro_shift: 0,
            banks_per_group: cfg.banks_per_group,
            xor: cfg.bank_xor,
        };
        let mut shift = line_shift;
        for &f in fields.iter().rev() {
            let w = width(f);
            let v = (shift, (1u64 << w) - 1);
            match f {
                Field::Co => m.co = v,
                Field::Ba => m.ba = v,
                Field::Bg => m.bg = v,
                Field::Ro => m.ro_shift = shift,
            }
            shift += w;
        }
        Ok(m)
    }

    /// (bank index, bank group, row) of a byte address.
    #[inline]
    pub fn decode(&self, addr: u64) -> (u32, u32, u64) {
        let mut ba = ((addr >> self.ba.0) & self.ba.1) as u32;
        let mut bg = ((addr >> self.bg.0) & self.bg.1) as u32;
        let row = addr >> self.ro_shift;
        if self.xor {
            // Permutation-based interleaving: the low row bits flip the bank
            // bits, so lines that share a cache set (and so the bank bits)
            // but not a row spread over banks.
            ba ^= (row & self.ba.1) as u32;
            bg ^= ((row >> self.ba.1.count_ones()) & self.bg.1) as u32;
        }
        (bg * self.banks_per_group + ba, bg, row)
    }

    /// Bits of a line offset.
    pub fn line_shift(&self) -> u32 {
        self.line_shift
    }
}

/// Row-buffer outcome counts.
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct RowStats {
    /// Accesses to the open row.
    pub hits: u64,
    /// Accesses to a bank with no open row (ACT needed).
    pub misses: u64,
    /// Accesses to a bank with another row open (PRE and ACT needed).
    pub conflicts: u64,
}

/// What the DRAM did.
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct DramStats {
    /// Line reads served.
    pub reads: u64,
    /// Line writes served.
    pub writes: u64,
    /// Row outcomes of reads.
    pub read_rows: RowStats,
    /// Row outcomes of writes.
    pub write_rows: RowStats,
    /// Mean read latency, arrival at the controller to last data, ns.
    pub read_lat_mean_ns: f64,
    /// Times the write queue started draining (high watermark reached).
    pub write_drains: u64,
    /// Time the data bus carried data, ns.
    pub bus_busy_ns: f64,
    /// All-bank refreshes issued.
    #[serde(default)]
    pub refreshes: u64,
}

/// A request queue's bookkeeping. Its requests are kept per bank, in the
/// bank's [`Lane`] next to the bank's timing (the scheduler reads them
/// together): a decision looks at a bank's oldest row hit and oldest other
/// request instead of every entry (see [`Dram::plan_banks`]).
struct Queue {
    /// Bit `i`: bank `i` (below 64) has requests. Held in place rather
    /// than behind a pointer: every decision reads it.
    busy: u64,
    /// The same for banks from 64 on: bit `i % 64` of word `i / 64 - 1`.
    busy_more: Vec<u64>,
    len: usize,
    /// The latest arrival pushed, clocks.
    last_arrive: u64,
    /// Every request arrived no earlier than the one pushed before it:
    /// then a bank's oldest request of a kind is also its earliest, which
    /// the scheduler's shortcut needs.
    sorted: bool,
}

/// A queued request.
#[derive(Clone, Copy, Debug, Default)]
struct Req {
    /// Arrival, ps.
    arrive_ps: u64,
    /// Arrival, clock cycles (rounded up).
    arrive: u64,
    row: u64,
    /// Age: lower is older (reads and writes share the count).
    id: u64,
    bank: u32,
}

impl Queue {
    fn new(nbanks: usize) -> Self {
        Queue {
            busy: 0,
            busy_more: vec![0; nbanks.div_ceil(64).saturating_sub(1)],
            len: 0,
            last_arrive: 0,
            sorted: true,
        }
    }

    /// The busy word of bank `i`.
    #[inline]
    fn word(&mut self, i: usize) -> &mut u64 {
        if i < 64 {
            &mut self.busy
        } else {
            &mut self.busy_more[i / 64 - 1]
        }
    }

    /// Counts a request queued in bank `i` arriving at clock `arrive`.
    #[inline]
    fn pushed(&mut self, i: usize, arrive: u64) {
        self.sorted &= arrive >= self.last_arrive;
        self.last_arrive = arrive;
        *self.word(i) |= 1 << (i % 64);
        self.len += 1;
    }

    /// Counts a request taken out of bank `i`, which has `left` now.
    #[inline]
    fn removed(&mut self, i: usize, left: usize) {
        if left == 0 {
            *self.word(i) &= !(1 << (i % 64));
        }
        self.len -= 1;
        if self.len == 0 {
            // An empty queue is in order whatever came before: without this
            // one early arrival would send every later plan to the full scan.
            self.sorted = true;
            self.last_arrive = 0;
        }
    }
}

/// One bank's requests of one queue, oldest first, and how many of them hit
/// the bank's open row.
#[derive(Clone, Debug, Default)]
struct Lane {
    reqs: Vec<Req>,
    hits: u32,
}

impl Lane {
    /// Takes out the `k`-th oldest request, which hits the open row if
    /// `hit`.
    #[inline]
    fn remove(&mut self, k: usize, hit: bool) -> Req {
        let r = self.reqs[k];
        if k + 1 == self.reqs.len() {
            // The newest (often the only) one: nothing moves.
            self.reqs.truncate(k);
        } else {
            self.reqs.remove(k);
        }
        self.hits -= u32::from(hit);
        r
    }

    /// The bank opened `row` (or closed: `NO_ROW`): counts the row hits.
    #[inline]
    fn opened(&mut self, row: u64) {
        self.hits = if row == NO_ROW {
            0
        } else {
            self.reqs.iter().filter(|r| r.row == row).count() as u32
        };
    }

    /// The position of the oldest request that hits `open` (`hit`) or does
    /// not; there is one.
    #[inline]
    fn oldest(&self, open: u64, hit: bool) -> usize {
        self.reqs
            .iter()
            .position(|r| (r.row == open) == hit)
            .unwrap_or(self.reqs.len())
    }
}

/// How the row of a bank came to be open, for the row statistics of the
/// first column command after its ACT.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Opened {
    /// No column command since the ACT, which found the bank closed.
    Miss,
    /// No column command since the ACT, which followed a PRE for a
    /// conflicting request.
    Conflict,
    /// The row has served a column command: later ones are hits.
    Served,
}

/// One bank's state: the open row, the first clock each command may
/// issue, and its queued requests.
#[derive(Clone, Debug)]
struct Bank {
    open: u64,
    act: u64,
    pre: u64,
    rd: u64,
    wr: u64,
    opened: Opened,
    /// The last PRE closed a row for a conflicting request (not refresh).
    closed_for_conflict: bool,
    /// Column commands since the ACT.
    hits: u32,
    /// Plan stamp: a queued request hits the open row (see `plan`).
    hit_waits: u64,
    /// Plan stamp: a queued request wants another row of this bank.
    conflict_waits: u64,
    /// Queued reads (0) and writes (1) to this bank.
    lanes: [Lane; 2],
}

impl Bank {
    /// The bank opened `row` (or closed: `NO_ROW`).
    #[inline]
    fn open_row(&mut self, row: u64) {
        self.open = row;
        self.lanes[0].opened(row);
        self.lanes[1].opened(row);
    }
}

/// Constraints of a bank group (same-group tCCD_L, tWTR_L, tRRD_L) or of
/// the rank (tCCD_S, tWTR_S, tRRD_S, turnarounds, the data bus).
#[derive(Clone, Copy, Debug, Default)]
struct Gate {
    act: u64,
    rd: u64,
    wr: u64,
}

/// Timing in clock cycles.
#[derive(Clone, Copy, Debug)]
struct Cyc {
    cl: u64,
    cwl: u64,
    rcd: u64,
    rp: u64,
    ras: u64,
    burst: u64,
    ccd_s: u64,
    ccd_l: u64,
    wr: u64,
    wtr_s: u64,
    wtr_l: u64,
    rtp: u64,
    rrd_s: u64,
    rrd_l: u64,
    faw: u64,
    rfc: u64,
    refi: u64,
    /// Read CAS to write CAS (the read data leaves the bus, plus two clocks
    /// of bus turnaround).
    rtw: u64,
}

/// A command to issue.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Cmd {
    Act,
    Pre,
    Col,
    /// PREA (if a row is open) then REF.
    Refresh,
}

/// The next command: what, when (clock), for which queue entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Plan {
    at: u64,
    cmd: Cmd,
    write: bool,
    /// The request: the `k`-th oldest of its bank's.
    bank: usize,
    k: usize,
    /// The write mode the plan was made in.
    draining: bool,
}

/// A read handed to the controller; [`Dram::completion`] turns it into a time.
pub type Ticket = u64;

/// The controller and its banks.
pub struct Dram {
    t: Cyc,
    tck: u64,
    map: Mapping,
    policy: PagePolicy,
    sched: Scheduler,
    write_policy: WritePolicy,
    hit_cap: u32,
    /// Clocks a command holds the command bus (1, or 0 without the limit).
    cmd_gap: u64,
    banks: Vec<Bank>,
    groups: Vec<Gate>,
    rank: Gate,
    /// The ends of the tFAW windows of the last four ACTs (ACT + tFAW), a
    /// ring: the next ACT may issue at the oldest.
    faw: [u64; 4],
    faw_i: usize,
    bg_shift: u32,
    /// The first clock the next command may issue (the command bus).
    now: u64,
    /// The clock the next refresh is due (`u64::MAX`: no refresh).
    next_ref: u64,
    stamp: u64,
    rq: Queue,
    wq: Queue,
    rq_cap: usize,
    wq_cap: usize,
    hi: usize,
    lo: usize,
    draining: bool,
    flush: bool,
    next_id: u64,
    done: Vec<(u64, u64)>,
    last_done: u64,
    read_lat_sum: u64,
    bus_busy: u64,
    stats: DramStats,
}

const NEVER: u64 = u64::MAX;

impl Dram {
    /// A controller for `cfg` with cache lines of `line_bytes`.
    pub fn new(cfg: &DramConfig, line_bytes: u32) -> Result<Self, String> {
        let t = &cfg.timing;
        let c = |n: u32| u64::from(n);
        let cyc = Cyc {
            cl: c(t.cl),
            cwl: c(t.cwl),
            rcd: c(t.trcd),
            rp: c(t.trp),
            ras: c(t.tras),
            burst: c(t.burst),
            ccd_s: c(t.tccd_s).max(c(t.burst)),
            ccd_l: c(t.tccd_l).max(c(t.burst)),
            wr: c(t.twr),
            wtr_s: c(t.twtr_s),
            wtr_l: c(t.twtr_l),
            rtp: c(t.trtp),
            rrd_s: c(t.trrd_s),
            rrd_l: c(t.trrd_l),
            faw: c(t.tfaw),
            rfc: c(t.trfc),
            refi: c(t.trefi),
            rtw: (c(t.cl) + c(t.burst) + 2).saturating_sub(c(t.cwl)),
        };
        let nbanks = (cfg.bank_groups * cfg.banks_per_group) as usize;
        Ok(Dram {
            t: cyc,
            tck: u64::from(t.tck_ps.max(1)),
            map: Mapping::new(cfg, line_bytes)?,
            policy: cfg.page_policy,
            sched: cfg.scheduler,
            write_policy: cfg.write_policy,
            hit_cap: cfg.row_hit_cap,
            cmd_gap: u64::from(cfg.command_bus_limit),
            banks: vec![
                Bank {
                    open: NO_ROW,
                    act: 0,
                    pre: 0,
                    rd: 0,
                    wr: 0,
                    opened: Opened::Served,
                    closed_for_conflict: false,
                    hits: 0,
                    hit_waits: 0,
                    conflict_waits: 0,
                    lanes: Default::default(),
                };
                nbanks
            ],
            groups: vec![Gate::default(); cfg.bank_groups as usize],
            rank: Gate::default(),
            faw: [0; 4],
            faw_i: 0,
            bg_shift: cfg.banks_per_group.trailing_zeros(),
            now: 0,
            next_ref: if cyc.refi > 0 { cyc.refi } else { NEVER },
            stamp: 0,
            rq: Queue::new(nbanks),
            wq: Queue::new(nbanks),
            rq_cap: cfg.read_queue as usize,
            wq_cap: cfg.write_queue as usize,
            hi: cfg.write_high_watermark as usize,
            lo: cfg.write_low_watermark as usize,
            draining: false,
            flush: false,
            next_id: 0,
            done: vec![(u64::MAX, 0); DONE_RING],
            last_done: 0,
            read_lat_sum: 0,
            bus_busy: 0,
            stats: DramStats::default(),
        })
    }

    /// Statistics so far.
    pub fn stats(&self) -> DramStats {
        let mut s = self.stats;
        s.bus_busy_ns = (self.bus_busy * self.tck) as f64 / 1000.0;
        if s.reads > 0 {
            s.read_lat_mean_ns = self.read_lat_sum as f64 / s.reads as f64 / 1000.0;
        }
        s
    }

    #[inline]
    fn req(&mut self, addr: u64, at_ps: u64) -> Req {
        let (bank, _, row) = self.map.decode(addr);
        let id = self.next_id;
        self.next_id += 1;
        Req {
            arrive_ps: at_ps,
            arrive: at_ps.div_ceil(self.tck),
            bank,
            row,
            id,
        }
    }

    /// Queues a read or a write (`write`).
    #[inline]
    fn queue(&mut self, r: Req, write: bool) {
        let i = r.bank as usize;
        let b = &mut self.banks[i];
        let lane = &mut b.lanes[usize::from(write)];
        lane.hits += u32::from(b.open == r.row);
        lane.reqs.push(r);
        let q = if write { &mut self.wq } else { &mut self.rq };
        q.pushed(i, r.arrive);
    }

    /// Every queued read (`write` false) or write as (bank, position,
    /// request), in no particular order.
    fn all(&self, write: bool) -> impl Iterator<Item = (usize, usize, &Req)> {
        self.banks.iter().enumerate().flat_map(move |(i, b)| {
            b.lanes[usize::from(write)]
                .reqs
                .iter()
                .enumerate()
                .map(move |(k, r)| (i, k, r))
        })
    }

    /// Submits a line read arriving at `at` (ps). Returns the ticket and the
    /// time the controller accepted it (later than `at` when the read queue
    /// was full).
    #[inline]
    pub fn read(&mut self, addr: u64, at: u64) -> (Ticket, u64) {
        self.advance(at);
        let mut acc = at;
        while self.rq.len >= self.rq_cap {
            acc = acc.max(self.step());
        }
        let r = self.req(addr, acc);
        self.queue(r, false);
        (r.id, acc)
    }

    /// Submits a line write (posted) arriving at `at` (ps); returns the time
    /// it was accepted (later than `at` when the write queue was full).
    #[inline]
    pub fn write(&mut self, addr: u64, at: u64) -> u64 {
        self.advance(at);
        let mut acc = at;
        while self.wq.len >= self.wq_cap {
            acc = acc.max(self.step());
        }
        let r = self.req(addr, acc);
        self.queue(r, true);
        acc
    }

    /// The time (ps) the read's last data arrives, scheduling as needed.
    #[inline]
    pub fn completion(&mut self, id: Ticket) -> u64 {
        loop {
            let (i, t) = self.done[(id % DONE_RING as u64) as usize];
            if i == id {
                return t;
            }
            // A read is queued until its column command issues, and then
            // its entry holds it until a later read's takes the place. An
            // older read's entry there means this one is still queued; only
            // a later read's (or none) needs the queue searched.
            if i > id && !self.all(false).any(|(_, _, r)| r.id == id) {
                // Completed so long ago that its ring entry was reused.
                return 0;
            }
            self.step();
        }
    }

    /// Issues every command due before `now` (ps).
    #[inline]
    pub fn advance(&mut self, now: u64) {
        let limit = now.div_ceil(self.tck);
        // No command issues before the command bus's next free clock.
        if limit <= self.now {
            return;
        }
        while self.issue_next(limit).is_some() {}
    }

    /// Serves everything queued; returns when (ps) the last data moved.
    pub fn finish(&mut self) -> u64 {
        self.flush = true;
        while self.rq.len + self.wq.len > 0 {
            if self.issue_next(NEVER).is_none() {
                break;
            }
        }
        self.last_done
    }

    /// Issues the next command; returns its time (ps). The queues are not
    /// both empty.
    #[inline]
    fn step(&mut self) -> u64 {
        match self.issue_next(NEVER) {
            Some(at) => at * self.tck,
            None => self.now * self.tck,
        }
    }

    /// Plans the next command and issues it if it may issue before clock
    /// `limit` (a command's clock is always below `NEVER`); returns its
    /// clock. The one place that plans and issues, so both are inlined in
    /// the simulator's hottest function.
    #[inline(never)]
    fn issue_next(&mut self, limit: u64) -> Option<u64> {
        let p = self.plan()?;
        if p.at >= limit {
            return None;
        }
        self.issue(p);
        Some(p.at)
    }

    /// Whether the write queue (`Some(true)`) or the read queue
    /// (`Some(false)`) is served, or neither (`None`: writes wait for
    /// company). With [`WritePolicy::Drain`] both are, and this is unused.
    #[inline]
    fn mode(&self) -> Option<bool> {
        let (nw, nr) = (self.wq.len, self.rq.len);
        let start_when_idle = match self.write_policy {
            WritePolicy::Ramulator => nw > 0,
            _ => nw > self.lo || (self.flush && nw > 0),
        };
        let writes = if self.draining {
            nw > 0 && !(nw <= self.lo && nr > 0)
        } else {
            nw >= self.hi || (nr == 0 && start_when_idle)
        };
        if writes {
            Some(true)
        } else if nr > 0 {
            Some(false)
        } else {
            None
        }
    }

    /// The command a request needs next and the first clock it may issue
    /// (`NEVER` when a PRE would close a row that queued requests still
    /// hit).
    #[inline]
    fn ready(&self, r: &Req, write: bool) -> (Cmd, u64) {
        let b = &self.banks[r.bank as usize];
        let g = &self.groups[(r.bank >> self.bg_shift) as usize];
        let at = if b.open == r.row {
            if self.hit_cap > 0
                && b.hits >= self.hit_cap
                && b.conflict_waits == self.stamp
                && self.sched == Scheduler::FrFcfs
            {
                // The row has had its share: the waiting conflict goes next.
                return (Cmd::Col, NEVER);
            }
            let (x, y, z) = if write {
                (b.wr, g.wr, self.rank.wr)
            } else {
                (b.rd, g.rd, self.rank.rd)
            };
            (Cmd::Col, x.max(y).max(z))
        } else if b.open == NO_ROW {
            let faw = self.faw[self.faw_i];
            (Cmd::Act, b.act.max(g.act).max(self.rank.act).max(faw))
        } else {
            let protect = self.sched == Scheduler::FrFcfs
                && b.hit_waits == self.stamp
                && (self.hit_cap == 0 || b.hits < self.hit_cap);
            (Cmd::Pre, if protect { NEVER } else { b.pre })
        };
        (at.0, at.1.max(r.arrive).max(self.now))
    }

    /// Offers a command for request `id` to the choice so far: the earliest
    /// clock wins; at the same clock (`fr-fcfs`) a row hit, then the oldest
    /// request.
    #[inline]
    fn offer(&self, best: &mut Option<(Plan, u64, bool)>, p: Plan, id: u64) {
        let hit = p.cmd == Cmd::Col && self.sched == Scheduler::FrFcfs;
        let better = match best {
            None => true,
            Some((b, bid, h)) => {
                p.at < b.at || (p.at == b.at && ((hit && !*h) || (hit == *h && id < *bid)))
            }
        };
        if better {
            *best = Some((p, id, hit));
        }
    }

    /// Considers every request of one queue for the next command (the
    /// scan of [`Dram::plan_scan`]).
    fn consider(&self, write: bool, draining: bool, best: &mut Option<(Plan, u64, bool)>) {
        for (bank, k, r) in self.all(write) {
            let (cmd, at) = self.ready(r, write);
            if at == NEVER {
                continue;
            }
            let p = Plan {
                at,
                cmd,
                write,
                bank,
                k,
                draining,
            };
            self.offer(best, p, r.id);
        }
    }

    /// Marks the banks whose open row a queued request of `q` hits, and
    /// those for which one wants another row.
    fn mark_hits(&mut self, write: bool) {
        let w = usize::from(write);
        for b in &mut self.banks {
            for r in &b.lanes[w].reqs {
                if b.open == r.row {
                    b.hit_waits = self.stamp;
                } else if b.open != NO_ROW {
                    b.conflict_waits = self.stamp;
                }
            }
        }
    }

    /// The next command of the served queues, found by asking every queued
    /// request what it needs next. The definition of the choice; used when
    /// requests arrived out of order, and in tests to check
    /// [`Dram::plan_banks`].
    fn plan_scan(&mut self, serve_r: bool, serve_w: bool, draining: bool) -> Option<Plan> {
        let mut best = None;
        self.stamp += 1;
        if self.sched == Scheduler::FrFcfs {
            if serve_r {
                self.mark_hits(false);
            }
            if serve_w {
                self.mark_hits(true);
            }
        }
        if serve_r {
            self.consider(false, draining, &mut best);
        }
        if serve_w {
            self.consider(true, draining, &mut best);
        }
        best.map(|(p, _, _)| p)
    }

    /// The same choice as [`Dram::plan_scan`], looking at a few requests of
    /// each bank with requests instead of at every request. Within one bank
    /// and queue, every request to the open row waits for the same
    /// constraints, and so does every other request; a request may issue at
    /// the later of those and its arrival. When requests arrive in order
    /// (`Queue::sorted`), the oldest of such a set is also the earliest and
    /// wins the set's ties: it is the set's only candidate.
    fn plan_banks(&self, serve_r: bool, serve_w: bool, draining: bool) -> Option<Plan> {
        match (serve_r, serve_w) {
            (true, false) => self.plan_banks_of::<true, false>(draining),
            (false, true) => self.plan_banks_of::<false, true>(draining),
            _ => self.plan_banks_of::<true, true>(draining),
        }
    }

    /// [`Dram::plan_banks`] for the reads (`R`) and the writes (`W`): one
    /// copy per mode, so that a decision in write mode (every busy bank's
    /// writes, several times per drain) carries no test of the read queue
    /// per bank (callgrind, file copy: 6-7% fewer instructions per run).
    fn plan_banks_of<const R: bool, const W: bool>(&self, draining: bool) -> Option<Plan> {
        let mut best = None;
        for w in 0..=self.rq.busy_more.len() {
            let word = |q: &Queue, on: bool| match (on, w) {
                (false, _) => 0,
                (true, 0) => q.busy,
                (true, _) => q.busy_more[w - 1],
            };
            let mut m = word(&self.rq, R) | word(&self.wq, W);
            while m != 0 {
                let i = w * 64 + m.trailing_zeros() as usize;
                m &= m - 1;
                self.consider_bank::<R, W>(i, draining, &mut best);
            }
        }
        best.map(|(p, _, _)| p)
    }

    /// Bank `i`'s candidates for [`Dram::plan_banks`]: the oldest row hit of
    /// each served queue, and the oldest other request of each.
    #[inline]
    fn consider_bank<const R: bool, const W: bool>(
        &self,
        i: usize,
        draining: bool,
        best: &mut Option<(Plan, u64, bool)>,
    ) {
        let b = &self.banks[i];
        let g = &self.groups[i >> self.bg_shift];
        let fr = self.sched == Scheduler::FrFcfs;
        let count = |l: &Lane, on: bool| {
            if on {
                (l.reqs.len() as u32, l.hits)
            } else {
                (0, 0)
            }
        };
        let (nr, hr) = count(&b.lanes[0], R);
        let (nw, hw) = count(&b.lanes[1], W);
        let hit_waits = hr + hw > 0;
        let others = nr - hr + nw - hw > 0;
        let mut offer = |write: bool, hit: bool, cmd: Cmd, c: u64| {
            let l = &b.lanes[usize::from(write)];
            let k = l.oldest(b.open, hit);
            let r = &l.reqs[k];
            let p = Plan {
                at: c.max(r.arrive).max(self.now),
                cmd,
                write,
                bank: i,
                k,
                draining,
            };
            self.offer(best, p, r.id);
        };
        // The row has had its share (`row_hit_cap`): a waiting conflict goes
        // next, and may precharge.
        let capped = fr && self.hit_cap > 0 && b.hits >= self.hit_cap;
        if hit_waits && !(capped && others) {
            if hr > 0 {
                offer(false, true, Cmd::Col, b.rd.max(g.rd).max(self.rank.rd));
            }
            if hw > 0 {
                offer(true, true, Cmd::Col, b.wr.max(g.wr).max(self.rank.wr));
            }
        }
        if others {
            let next = if b.open == NO_ROW {
                let faw = self.faw[self.faw_i];
                Some((Cmd::Act, b.act.max(g.act).max(self.rank.act).max(faw)))
            } else if fr && hit_waits && !capped {
                // No PRE while a queued request hits the open row.
                None
            } else {
                Some((Cmd::Pre, b.pre))
            };
            if let Some((cmd, c)) = next {
                if nr > hr {
                    offer(false, false, cmd, c);
                }
                if nw > hw {
                    offer(true, false, cmd, c);
                }
            }
        }
    }

    /// The next command, or `None` when nothing can be done (no request is
    /// served and refresh is off).
    #[inline(always)]
    fn plan(&mut self) -> Option<Plan> {
        let (serve_r, serve_w, draining) = match self.write_policy {
            WritePolicy::Drain => (true, true, false),
            _ => match self.mode() {
                Some(true) => (false, true, true),
                Some(false) => (true, false, false),
                None => (false, false, false),
            },
        };
        let normal = if !(serve_r || serve_w) {
            None
        } else if self.rq.sorted && self.wq.sorted {
            let p = self.plan_banks(serve_r, serve_w, draining);
            #[cfg(test)]
            assert_eq!(p, self.plan_scan(serve_r, serve_w, draining));
            p
        } else {
            self.plan_scan(serve_r, serve_w, draining)
        };
        if self.next_ref != NEVER {
            let due = self.next_ref.max(self.now);
            if normal.is_none_or(|p| p.at >= due) {
                return Some(Plan {
                    at: due,
                    cmd: Cmd::Refresh,
                    write: false,
                    bank: 0,
                    k: 0,
                    draining: self.draining,
                });
            }
        }
        normal
    }

    /// Issues a planned command.
    #[inline(always)]
    fn issue(&mut self, p: Plan) {
        if p.cmd == Cmd::Refresh {
            self.refresh(p.at);
            return;
        }
        if p.draining && !self.draining {
            self.stats.write_drains += 1;
        }
        if self.write_policy != WritePolicy::Drain {
            self.draining = p.draining;
        }
        let t = &self.t;
        let c = p.at;
        self.now = c + self.cmd_gap;
        let gi = p.bank >> self.bg_shift;
        let b = &mut self.banks[p.bank];
        let r = b.lanes[usize::from(p.write)].reqs[p.k];
        match p.cmd {
            Cmd::Pre => {
                b.open_row(NO_ROW);
                b.closed_for_conflict = true;
                b.act = b.act.max(c + t.rp);
            }
            Cmd::Act => {
                b.open_row(r.row);
                b.opened = if b.closed_for_conflict {
                    Opened::Conflict
                } else {
                    Opened::Miss
                };
                b.hits = 0;
                b.rd = b.rd.max(c + t.rcd);
                b.wr = b.wr.max(c + t.rcd);
                b.pre = b.pre.max(c + t.ras);
                b.act = b.act.max(c + t.ras + t.rp);
                let g = &mut self.groups[gi];
                g.act = g.act.max(c + t.rrd_l);
                self.rank.act = self.rank.act.max(c + t.rrd_s);
                self.faw[self.faw_i] = c + t.faw;
                self.faw_i = (self.faw_i + 1) & 3;
            }
            Cmd::Col => {
                let rows = if p.write {
                    &mut self.stats.write_rows
                } else {
                    &mut self.stats.read_rows
                };
                match b.opened {
                    Opened::Miss => rows.misses += 1,
                    Opened::Conflict => rows.conflicts += 1,
                    Opened::Served => rows.hits += 1,
                }
                b.opened = Opened::Served;
                b.hits = b.hits.saturating_add(1);
                let g = &mut self.groups[gi];
                let rk = &mut self.rank;
                let end = if p.write {
                    let data_end = c + t.cwl + t.burst;
                    b.pre = b.pre.max(data_end + t.wr);
                    g.wr = g.wr.max(c + t.ccd_l);
                    rk.wr = rk.wr.max(c + t.ccd_s);
                    g.rd = g.rd.max(data_end + t.wtr_l);
                    rk.rd = rk.rd.max(data_end + t.wtr_s);
                    data_end
                } else {
                    b.pre = b.pre.max(c + t.rtp);
                    g.rd = g.rd.max(c + t.ccd_l);
                    rk.rd = rk.rd.max(c + t.ccd_s);
                    g.wr = g.wr.max(c + t.rtw).max(c + t.ccd_l);
                    rk.wr = rk.wr.max(c + t.rtw);
                    c + t.cl + t.burst
                };
                let lane = &mut b.lanes[usize::from(p.write)];
                lane.remove(p.k, true);
                let left = lane.reqs.len();
                let q = if p.write { &mut self.wq } else { &mut self.rq };
                q.removed(p.bank, left);
                if self.policy == PagePolicy::Closed {
                    // Auto-precharge: the row closes as soon as it may.
                    b.open_row(NO_ROW);
                    b.closed_for_conflict = false;
                    b.act = b.act.max(b.pre + t.rp);
                }
                let end_ps = end * self.tck;
                self.last_done = self.last_done.max(end_ps);
                self.bus_busy += t.burst;
                if p.write {
                    self.stats.writes += 1;
                } else {
                    self.stats.reads += 1;
                    self.read_lat_sum += end_ps.saturating_sub(r.arrive_ps);
                    self.done[(r.id % DONE_RING as u64) as usize] = (r.id, end_ps);
                }
            }
            Cmd::Refresh => {}
        }
    }

    /// An all-bank refresh due at clock `at`: PREA once every open bank may
    /// precharge, REF once every bank may activate, then no ACT for tRFC.
    fn refresh(&mut self, at: u64) {
        let t = self.t;
        let mut c = at;
        let open = self.banks.iter().any(|b| b.open != NO_ROW);
        if open {
            let prea = self
                .banks
                .iter()
                .filter(|b| b.open != NO_ROW)
                .map(|b| b.pre)
                .fold(c, u64::max);
            for b in &mut self.banks {
                if b.open != NO_ROW {
                    b.open_row(NO_ROW);
                    b.act = b.act.max(prea + t.rp);
                }
            }
            c = prea + self.cmd_gap;
        }
        let refc = self.banks.iter().map(|b| b.act).fold(c, u64::max);
        for b in &mut self.banks {
            b.act = refc + t.rfc;
            b.closed_for_conflict = false;
        }
        self.now = refc + self.cmd_gap;
        self.next_ref += t.refi;
        self.stats.refreshes += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ddr4() -> DramConfig {
        DramConfig::preset("ddr4-3200").unwrap()
    }

    #[test]
    fn mapping_places_fields() {
        let c = ddr4();
        let m = Mapping::new(&c, 64).unwrap();
        // ro-ba-bg-co: 7 column bits above 6 offset bits, then 2 bg, 2 ba.
        assert_eq!(m.decode(0), (0, 0, 0));
        assert_eq!(m.decode(8191), (0, 0, 0));
        assert_eq!(m.decode(8192), (4, 1, 0)); // bank group 1, bank 0
        assert_eq!(m.decode(8192 * 4), (1, 0, 0)); // bank 1 of group 0
        assert_eq!(m.decode(8192 * 16), (0, 0, 1)); // next row
        let mut c2 = ddr4();
        c2.mapping = "ro-co-ba-bg".into();
        let m2 = Mapping::new(&c2, 64).unwrap();
        assert_eq!(m2.decode(64), (4, 1, 0)); // consecutive lines change bank group
        assert!(Mapping::parse("ba-ro-bg-co").is_err());
        assert!(Mapping::parse("ro-ba-ba-co").is_err());
    }

    #[test]
    fn row_hit_miss_conflict_latencies() {
        let c = ddr4();
        let mut d = Dram::new(&c, 64).unwrap();
        let tck = 625;
        // Closed bank: ACT + tRCD + CL + burst.
        let (a, _) = d.read(0, 0);
        assert_eq!(d.completion(a), (22 + 22 + 4) * tck);
        // Row hit, issued after the first finished: CL + burst.
        let t1 = 100_000;
        let (b, _) = d.read(64, t1);
        assert_eq!(d.completion(b), t1 + (22 + 4) * tck);
        // Same bank, other row: PRE + ACT + CAS.
        let t2 = 200_000;
        let (c3, _) = d.read(8192 * 16, t2);
        assert_eq!(d.completion(c3), t2 + (22 + 22 + 22 + 4) * tck);
        let s = d.stats();
        assert_eq!(
            (s.read_rows.hits, s.read_rows.misses, s.read_rows.conflicts),
            (1, 1, 1)
        );
    }

    #[test]
    fn fr_fcfs_serves_row_hits_first() {
        for (sched, want_hits) in [(Scheduler::FrFcfs, 2), (Scheduler::Fcfs, 1)] {
            let mut c = ddr4();
            c.scheduler = sched;
            let mut d = Dram::new(&c, 64).unwrap();
            // Open row 0 of bank 0.
            let (a, _) = d.read(0, 0);
            d.completion(a);
            // At t, a conflict (row 1) then a hit (row 0), then another hit,
            // all in the queue before the next decision.
            let t = 1_000_000;
            let (x, _) = d.read(8192 * 16, t);
            let (y, _) = d.read(64, t);
            let (z, _) = d.read(128, t);
            let (cx, cy, cz) = (d.completion(x), d.completion(y), d.completion(z));
            let s = d.stats();
            assert_eq!(s.read_rows.hits, want_hits, "{sched:?}");
            if sched == Scheduler::FrFcfs {
                assert!(cy < cx && cz < cx);
            } else {
                assert!(cx < cy && cx < cz);
            }
        }
    }

    #[test]
    fn closed_page_never_hits() {
        let mut c = ddr4();
        c.page_policy = PagePolicy::Closed;
        let mut d = Dram::new(&c, 64).unwrap();
        for i in 0..4 {
            let (a, _) = d.read(i * 64, i * 100_000);
            d.completion(a);
        }
        let s = d.stats();
        assert_eq!((s.read_rows.hits, s.read_rows.misses), (0, 4));
    }

    #[test]
    fn writes_wait_for_the_high_watermark() {
        let mut c = ddr4();
        c.write_queue = 8;
        c.write_high_watermark = 4;
        c.write_low_watermark = 1;
        let mut d = Dram::new(&c, 64).unwrap();
        // A read keeps the controller busy with reads; writes queue up.
        for i in 0..3 {
            assert_eq!(d.write(i * 64, 0), 0);
        }
        let (r, _) = d.read(1 << 20, 0);
        d.completion(r);
        assert_eq!(d.stats().writes, 0, "below the watermark reads go first");
        d.write(3 * 64, 0);
        let (r2, _) = d.read(2 << 20, 0);
        d.completion(r2);
        let s = d.stats();
        assert_eq!((s.writes, s.write_drains), (3, 1), "drained down to 1");
        assert!(d.finish() > 0);
        assert_eq!(d.stats().writes, 4);
    }

    #[test]
    fn refresh_holds_off_activates_for_trfc() {
        let mut c = ddr4();
        let tck = 625;
        let (refi, rfc) = (u64::from(c.timing.trefi), u64::from(c.timing.trfc));
        let mut d = Dram::new(&c, 64).unwrap();
        // A read to a closed bank arriving just as the refresh is due: REF
        // at tREFI, then ACT tRFC later.
        let (a, _) = d.read(0, refi * tck);
        assert_eq!(d.completion(a), (refi + rfc + 22 + 22 + 4) * tck);
        assert_eq!(d.stats().refreshes, 1);
        // Switched off: the same read is served at once.
        c.timing.trefi = 0;
        let mut d = Dram::new(&c, 64).unwrap();
        let (a, _) = d.read(0, refi * tck);
        assert_eq!(d.completion(a), (refi + 22 + 22 + 4) * tck);
        assert_eq!(d.stats().refreshes, 0);
    }

    #[test]
    fn tfaw_and_trrd_space_activates() {
        let mut c = ddr4();
        c.timing.trefi = 0;
        let tck = 625;
        // Five reads to five banks of different groups where possible, all
        // at 0: ACTs at 0, 4 (tRRD_S), 8, 12, then the fifth waits for the
        // first's tFAW window (34).
        let lines = [0u64, 8192, 2 * 8192, 3 * 8192, 4 * 8192];
        let mut d = Dram::new(&c, 64).unwrap();
        let t: Vec<_> = lines.iter().map(|&a| d.read(a, 0).0).collect();
        let done: Vec<u64> = t.iter().map(|&k| d.completion(k) / tck).collect();
        // Bank 4 * 8192 is bank 1 of group 0 (after groups 0-3): tRRD_L
        // from the ACT at 0 is long past; tFAW decides (34), and the fourth
        // read's RD (12 + 22) holds the command bus then, so the ACT issues
        // at 35.
        assert_eq!(done[..4], [48, 52, 56, 60]);
        assert_eq!(done[4], 35 + 22 + 22 + 4, "{done:?}");
        // Without tFAW (and tRRD) the fifth ACT follows the fourth at once.
        c.timing.tfaw = 0;
        c.timing.trrd_s = 0;
        c.timing.trrd_l = 0;
        let mut d = Dram::new(&c, 64).unwrap();
        let t: Vec<_> = lines.iter().map(|&a| d.read(a, 0).0).collect();
        let done2: Vec<u64> = t.iter().map(|&k| d.completion(k) / tck).collect();
        assert!(done2[4] < done[4], "{done2:?} vs {done:?}");
    }

    #[test]
    fn write_policies_differ_on_a_lone_write() {
        use crate::config::WritePolicy;
        // One write, then a read much later: under `watermark` the write
        // waits for company (below the low watermark), under `ramulator`
        // and `drain` it is written while no read waits.
        for (policy, written) in [
            (WritePolicy::Watermark, 0),
            (WritePolicy::Ramulator, 1),
            (WritePolicy::Drain, 1),
        ] {
            let mut c = ddr4();
            c.write_policy = policy;
            let mut d = Dram::new(&c, 64).unwrap();
            d.write(1 << 20, 0);
            d.advance(1_000_000);
            assert_eq!(d.stats().writes, written, "{policy:?}");
        }
    }
    /// The per-bank scheduler (`plan_banks`) picks the same command as the
    /// scan of every request (`plan_scan`) at every step: `plan` asserts it
    /// in test builds. Random request streams over four rows of every bank,
    /// under every scheduler, write policy, page policy, row-hit cap and
    /// preset (and with more than 64 banks), with queues from nearly empty
    /// to full.
    #[test]
    fn bank_scheduler_picks_what_the_full_scan_picks() {
        use crate::config::WritePolicy;
        use rand::{Rng, SeedableRng};
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(16);
        let presets = ["ddr4-3200", "ddr5-4800", "ddr2-800"];
        let mut served = 0;
        for case in 0..240 {
            let mut c = DramConfig::preset(presets[case % 3]).unwrap();
            if case % 10 == 9 {
                // More than 64 banks (the busy bits past the first word).
                c.bank_groups *= 16;
            }
            c.scheduler = if rng.gen_bool(0.2) {
                Scheduler::Fcfs
            } else {
                Scheduler::FrFcfs
            };
            c.write_policy = [
                WritePolicy::Watermark,
                WritePolicy::Ramulator,
                WritePolicy::Drain,
            ][rng.gen_range(0..3)];
            c.page_policy = if rng.gen_bool(0.15) {
                PagePolicy::Closed
            } else {
                PagePolicy::Open
            };
            c.row_hit_cap = [0, 0, 1, 4][rng.gen_range(0..4)];
            c.command_bus_limit = rng.gen_bool(0.8);
            if rng.gen_bool(0.3) {
                c.timing.trefi = 0;
            } else if rng.gen_bool(0.3) {
                // Refresh often, to meet it at every queue state.
                c.timing.trefi = c.timing.trfc * 3;
            }
            c.read_queue = rng.gen_range(1..40);
            c.write_queue = rng.gen_range(2..40);
            c.write_high_watermark = rng.gen_range(2..=c.write_queue);
            c.write_low_watermark = rng.gen_range(0..c.write_high_watermark);
            let mut d = Dram::new(&c, 64).unwrap();
            let banks = u64::from(c.bank_groups * c.banks_per_group);
            let rows = u64::from(c.row_bytes);
            let tck = u64::from(c.timing.tck_ps);
            let slots = rng.gen_range(1..48);
            let write_share = rng.gen_range(0.0..0.8);
            let max_gap = [0, 4, 40, 400][rng.gen_range(0..4)];
            let mut out = std::collections::VecDeque::new();
            let mut t = 0u64;
            for _ in 0..600 {
                let addr = rng.gen_range(0..4 * banks) * rows + rng.gen_range(0..4) * 64;
                if rng.gen_bool(write_share) {
                    t = t.max(d.write(addr, t));
                } else {
                    if out.len() >= slots {
                        let old = out.pop_front().unwrap();
                        t = t.max(d.completion(old));
                    }
                    let (tk, acc) = d.read(addr, t);
                    out.push_back(tk);
                    t = t.max(acc);
                }
                t += rng.gen_range(0..=max_gap) * tck + rng.gen_range(0..tck);
            }
            for tk in out {
                d.completion(tk);
            }
            d.finish();
            let s = d.stats();
            assert_eq!(s.reads + s.writes, 600, "case {case}");
            served += s.reads + s.writes;
        }
        assert_eq!(served, 240 * 600);
    }

    /// Requests that arrive earlier than the one before (the simulator never
    /// does this; the API allows it) are scheduled by the full scan.
    #[test]
    fn out_of_order_arrivals_use_the_full_scan() {
        let mut d = Dram::new(&ddr4(), 64).unwrap();
        let (a, _) = d.read(0, 1_000_000);
        assert!(d.rq.sorted);
        let (b, _) = d.read(8192 * 16, 0);
        assert!(!d.rq.sorted);
        let (tb, ta) = (d.completion(b), d.completion(a));
        assert!(tb < ta, "the earlier arrival goes first: {tb} {ta}");
        assert_eq!(d.stats().reads, 2);
        // Both served: the queue is empty and in order again, so the next
        // requests take the bank shortcut.
        assert!(d.rq.sorted, "an emptied queue is in order");
        let (c, _) = d.read(0, 2_000_000);
        assert!(d.rq.sorted);
        d.completion(c);
    }
}
