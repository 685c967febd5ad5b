//! dmalab sim: trace-driven simulator of CPU and DMA traffic through LLC, DDIO ways, a DMA cache and DRAM banks.
