//! The real perf_event_open path with software events: a page-fault count
//! equal to the pages this test touches.

use dmalab_counters::catalog::Catalog;
use dmalab_counters::recipes::CpuId;
use dmalab_counters::session::{Request, Scope, Session};
use dmalab_counters::Roots;

const PAGES: usize = 2000;
/// Faults the counted thread may take besides the touched pages (its stack,
/// the allocator, lazily bound library code between start and stop).
const TOLERANCE: f64 = 64.0;

#[test]
fn page_faults_equal_pages_touched() {
    let roots = Roots::from_env();
    let req = Request::parse_with(
        "--counters",
        "page-faults,task-clock,context-switches",
        &Catalog::read(&roots.pmu),
        CpuId::default(),
    )
    .unwrap();
    // SAFETY: gettid has no arguments.
    let tid = unsafe { libc::syscall(libc::SYS_gettid) } as i32;
    let state = tempfile::tempdir().unwrap();
    let mut s = Session::open(&req, &Scope::Threads(vec![tid]), &roots, state.path());
    let rep = s.report();
    if !rep.unavailable.is_empty() {
        let why: Vec<String> = rep.unavailable.iter().map(|u| u.message.clone()).collect();
        if std::env::var_os("DMALAB_CI").is_some() {
            panic!("software events unavailable under DMALAB_CI: {why:?}");
        }
        eprintln!("SKIPPED: software perf events unavailable: {why:?}");
        return;
    }
    let len = PAGES * 4096;
    // SAFETY: anonymous private mapping of len bytes, checked below.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    assert_ne!(p, libc::MAP_FAILED);
    // Transparent huge pages would serve 512 pages with one fault.
    // SAFETY: the range is the mapping made above.
    unsafe { libc::madvise(p, len, libc::MADV_NOHUGEPAGE) };
    s.start();
    for i in 0..PAGES {
        // SAFETY: inside the mapping; one write per page.
        unsafe { std::ptr::write_volatile((p as *mut u8).add(i * 4096), 1) };
    }
    s.stop();
    s.sample(0.5);
    // SAFETY: unmapping what was mapped.
    unsafe { libc::munmap(p, len) };
    let rep = s.report();
    let pf = rep.events.iter().find(|e| e.id == "page-faults").unwrap();
    assert!(
        pf.value >= PAGES as f64 && pf.value <= PAGES as f64 + TOLERANCE,
        "page-faults {} for {PAGES} pages touched (tolerance +{TOLERANCE})",
        pf.value
    );
    assert_eq!(pf.running_fraction, 1.0);
    let tc = rep.events.iter().find(|e| e.id == "task-clock").unwrap();
    assert!(tc.value > 0.0 && tc.unit == "ns");
    assert_eq!(rep.series.len(), 1);
    assert_eq!(rep.series[0].events["page-faults"], pf.value);
}
