//! `dmalab load` as a child of another command (an experiment's
//! aggressor): the keys its table may give, each a flag of the command.
//! The binary's tests parse [`LoadChildOptions::example`]'s argv with the real
//! `dmalab load` definition, so a flag renamed on one side fails there.

use dmalab_core::child_options;

child_options! {
    /// The options of `dmalab load` an experiment's `[[aggressor]]` table
    /// may set (each key is the flag without its dashes: `max_blocks = 8`
    /// is `--max-blocks 8`).
    pub struct LoadChildOptions for ["load"] {
        /// `--target`.
        target: Values = "/tmp/dmalab-load-target",
        /// `--engine`.
        engine: Values = "null",
        /// `--size`.
        size: Values = "64M",
        /// `--region`.
        region: Values = "32M",
        /// `--keep`.
        keep: Switch,
        /// `--pattern`.
        pattern: Values = "random",
        /// `--direction`.
        direction: Values = "write",
        /// `--device-offsets`.
        device_offsets: Values = "sequential",
        /// `--bs`.
        bs: Values = "4K",
        /// `--max-blocks`.
        max_blocks: Values = "32",
        /// `--buffer`.
        buffer: Values = "64M",
        /// `--fill`.
        fill: Values = "zero",
        /// `--workers`.
        workers: Values = "1",
        /// `--cpus-allowed`.
        cpus_allowed: Values = "0",
        /// `--cpus-allowed-policy`.
        cpus_allowed_policy: Values = "shared",
        /// `--iodepth`.
        iodepth: Values = "16",
        /// `--hugepages`.
        hugepages: Values = "none",
        /// `--membind` (the buffer's NUMA node; alias `--numa-node`).
        membind: Values = "0",
        /// `--buffer-file` (a DAX device or file backing the buffer).
        buffer_file: Values = "/tmp/dmalab-buffer-file",
        /// `--cache`.
        cache: Values = "none",
        /// `--rate`.
        rate: Values = "100M/s",
        /// `--rate-iops`.
        rate_iops: Values = "10k/s",
        /// `--timeslot`.
        timeslot: Values = "100ms",
        /// `--arrival`.
        arrival: Values = "uniform",
        /// `--burst`.
        burst: Switch,
        /// `--runtime`.
        runtime: Values = "5s",
        /// `--commands`.
        commands: Values = "1000",
        /// `--blocks`.
        blocks: Values = "1000",
        /// `--seed`.
        seed: Values = "1",
        /// `--allow-destroy`.
        allow_destroy: Values = "/tmp/dmalab-load-target",
        /// `--rate-control`.
        rate_control: Values = "/tmp/dmalab-rate-control",
        /// `--realtime`.
        realtime: Switch,
        /// `--trace`.
        trace: Values = "/tmp/dmalab-load.trace",
        /// `--dry-run`.
        dry_run: Switch,
        /// `--format-before`.
        format_before: Switch,
        /// `--buffer-checksum`.
        buffer_checksum: Switch,
        /// `--quiet`.
        quiet: Switch,
        /// `--counters`.
        counters: Values = "software",
        /// `--counters-mode`.
        counters_mode: Values = "multiplexed",
        /// `--rdma-op` (engine rdma).
        rdma_op: Values = "write",
        /// `--qps` (engine rdma).
        qps: Values = "1",
        /// `--rdma-remote-buffer` (engine rdma).
        rdma_remote_buffer: Values = "64M",
        /// `--rdma-device` (engine rdma).
        rdma_device: Values = "mlx5_0",
        /// `--rdma-port` (engine rdma).
        rdma_port: Values = "1",
        /// `--gid-index` (engine rdma).
        gid_index: Values = "0",
        /// `--rdma-inline` (engine rdma).
        rdma_inline: Switch,
        /// `--rdma-secret-file` (engine rdma).
        rdma_secret_file: Values = "/tmp/dmalab-rdma-secret",
        /// `--signal-every` (engine rdma).
        signal_every: Values = "8",
        /// `--mtu` (engine rdma).
        mtu: Values = "1024",
        /// `--rdma-mix-order` (engine rdma).
        rdma_mix_order: Values = "interleave",
        /// `--sqpoll-cpu` (engine io_uring).
        sqpoll_cpu: Values = "1",
        /// `--iopoll` (engine io_uring).
        iopoll: Switch,
        /// `--register-files` (engine io_uring).
        register_files: Values = "false",
        /// `--submit-batch` (engine io_uring).
        submit_batch: Values = "2",
        /// `--gpus` (engine gpu).
        gpus: Values = "0",
        /// `--gpu-wait` (engine gpu).
        gpu_wait: Values = "sleep",
        /// `--gpu-copy` (engine gpu).
        gpu_copy: Values = "d2d",
    }
    runner_sets {
        live_stats: Values = "/tmp/dmalab-live",
        output: Values = "/tmp/dmalab-out.json",
        output_format: Values = "json",
        counters_run: Values = "0",
    }
}
