//! Memory, hugepage pools, THP, swap and zram.

use super::*;

pub(super) fn memory(root: &HostRoot, host: &HostInfo) -> MemoryFacts {
    let hp = root.path("/sys/kernel/mm/hugepages");
    let hugepages = dir_names(&hp)
        .into_iter()
        .filter_map(|n| {
            let kb: u64 = n
                .strip_prefix("hugepages-")?
                .strip_suffix("kB")?
                .parse()
                .ok()?;
            let d = hp.join(&n);
            Some(HugePool {
                page_bytes: kb * 1024,
                total: num(&d.join("nr_hugepages")).unwrap_or(0),
                free: num(&d.join("free_hugepages")).unwrap_or(0),
                reserved: num(&d.join("resv_hugepages")).unwrap_or(0),
            })
        })
        .collect();
    let zram = dir_names(&root.path("/sys/block"))
        .into_iter()
        .filter(|n| n.starts_with("zram"))
        .map(|n| {
            let d = root.path(&format!("/sys/block/{n}"));
            ZramFacts {
                disksize_bytes: num(&d.join("disksize")).unwrap_or(0),
                algorithm: selected(&d.join("comp_algorithm")),
                name: n,
            }
        })
        .collect();
    MemoryFacts {
        mem_total_bytes: host.mem_total_bytes,
        mem_available_bytes: host.mem_available_bytes,
        hugepages,
        thp_enabled: selected(&root.path("/sys/kernel/mm/transparent_hugepage/enabled")),
        thp_defrag: selected(&root.path("/sys/kernel/mm/transparent_hugepage/defrag")),
        swaps: dmalab_core::sys::swaps::parse_swaps(
            &fs::read_to_string(root.path("/proc/swaps")).unwrap_or_default(),
        ),
        zram,
    }
}
