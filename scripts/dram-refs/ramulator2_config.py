"""Ramulator 2 configuration for dmalab's DRAM check (scripts/compare-dram.sh):
one channel, one rank of DDR4-3200AA x8 8 Gb devices, row-bank-bankgroup-column
mapping, open page, FR-FCFS, 32-entry read and write buffers, all-bank refresh.
Export with `python3 -m ramulator export ramulator2_config.py -o config.yaml`."""

import ramulator

frontend = ramulator.frontend.External(clock_ratio=1)
dram = ramulator.dram.DDR4(org_preset="DDR4_8Gb_x8", timing_preset="DDR4_3200AA", rank=1)
ctrl = ramulator.controller.GenericDDR(
    dram=dram,
    scheduler=ramulator.scheduler.FRFCFS(),
    refresh_manager=ramulator.refresh_manager.AllBank(),
    row_policy=ramulator.row_policy.Open(),
    addr_mapper=ramulator.addr_mapper.RoBaRaCoCh(),
    read_buffer_size=32,
    write_buffer_size=32,
)
mem = ramulator.memory_system.GenericDRAM(
    clock_ratio=1,
    controllers=[ctrl],
    channel_mapper=ramulator.channel_mapper.CacheLineInterleave(),
)
sim = ramulator.Simulation(frontend, mem)
