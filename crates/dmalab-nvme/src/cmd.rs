//! NVMe submission entries as the Linux passthrough interfaces take them.
//!
//! `struct nvme_passthru_cmd` (the `NVME_IOCTL_*_CMD` ioctls) and
//! `struct nvme_uring_cmd` (io_uring `IORING_OP_URING_CMD`) share one 72-byte
//! layout (include/uapi/linux/nvme_ioctl.h); only the last word differs
//! (`result` there, reserved here). [`PassthruCmd`] is that layout. The
//! kernel builds the 64-byte submission queue entry from it: it fills in the
//! command identifier and the PRPs for `addr`/`data_len` itself.

/// NVM command set opcodes (NVMe base specification, "NVM Command Set").
pub mod opcode {
    /// Flush: persist everything written so far; moves no data.
    pub const FLUSH: u8 = 0x00;
    /// Write: host memory -> storage (the device reads memory by DMA).
    pub const WRITE: u8 = 0x01;
    /// Read: storage -> host memory (the device writes memory by DMA).
    pub const READ: u8 = 0x02;
    /// Admin: Identify.
    pub const ADMIN_IDENTIFY: u8 = 0x06;
    /// Admin: Format NVM.
    pub const ADMIN_FORMAT_NVM: u8 = 0x80;
}

/// Identify CNS values.
pub mod cns {
    /// Identify Namespace data structure for the given NSID.
    pub const NAMESPACE: u32 = 0x00;
    /// Identify Controller data structure.
    pub const CONTROLLER: u32 = 0x01;
}

/// Size of the Identify data structures.
pub const IDENTIFY_LEN: usize = 4096;

/// Bytes of a submission queue entry on the wire (what the device fetches by
/// DMA for every command, the thesis' "64 B per command").
pub const SQE_BYTES: u64 = 64;
/// Bytes of a completion queue entry on the wire ("16 B per command").
pub const CQE_BYTES: u64 = 16;

/// Largest block count one Read/Write can carry: NLB is a 16-bit zero-based
/// field, so 0xffff means 65536 blocks.
pub const MAX_NLB_BLOCKS: u32 = 1 << 16;

/// One NVMe command in the kernel's passthrough layout
/// (`struct nvme_passthru_cmd` / `struct nvme_uring_cmd`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PassthruCmd {
    /// Command opcode (CDW0 bits 7:0).
    pub opcode: u8,
    /// Fused-operation and PRP/SGL flags; must be 0 for passthrough.
    pub flags: u8,
    /// Reserved.
    pub rsvd1: u16,
    /// Namespace identifier.
    pub nsid: u32,
    /// Command dword 2.
    pub cdw2: u32,
    /// Command dword 3.
    pub cdw3: u32,
    /// Metadata buffer address (unused: dmalab moves no metadata).
    pub metadata: u64,
    /// Data buffer address in the calling process.
    pub addr: u64,
    /// Metadata length, bytes.
    pub metadata_len: u32,
    /// Data length, bytes.
    pub data_len: u32,
    /// Command dword 10.
    pub cdw10: u32,
    /// Command dword 11.
    pub cdw11: u32,
    /// Command dword 12.
    pub cdw12: u32,
    /// Command dword 13.
    pub cdw13: u32,
    /// Command dword 14.
    pub cdw14: u32,
    /// Command dword 15.
    pub cdw15: u32,
    /// Timeout, milliseconds (0: the driver's default).
    pub timeout_ms: u32,
    /// Completion dword 0 for the ioctls; reserved for io_uring.
    pub result: u32,
}

const _: () = assert!(std::mem::size_of::<PassthruCmd>() == 72);

impl PassthruCmd {
    /// A Read or Write of `blocks` logical blocks starting at `slba`, moving
    /// `blocks * lba_size` bytes at `addr`.
    ///
    /// NLB (CDW12 bits 15:0) is **zero-based**: one block is NLB 0. nvme-memload
    /// put the block count there unchanged, so its `single` pattern moved two
    /// blocks per command while reporting one. `blocks` must be 1..=65536.
    pub fn rw(
        opcode: u8,
        nsid: u32,
        slba: u64,
        blocks: u32,
        lba_size: u32,
        addr: u64,
    ) -> Result<Self, crate::Error> {
        if blocks == 0 || blocks > MAX_NLB_BLOCKS {
            return Err(crate::Error::BadCommand(format!(
                "a Read/Write carries 1..={MAX_NLB_BLOCKS} blocks, not {blocks}"
            )));
        }
        let data_len = u64::from(blocks) * u64::from(lba_size);
        let data_len = u32::try_from(data_len).map_err(|_| {
            crate::Error::BadCommand(format!("{data_len} bytes do not fit one command"))
        })?;
        Ok(Self {
            opcode,
            nsid,
            addr,
            data_len,
            cdw10: slba as u32,
            cdw11: (slba >> 32) as u32,
            cdw12: blocks - 1,
            ..Default::default()
        })
    }

    /// Read (storage -> memory) of `blocks` blocks at `slba` into `addr`.
    pub fn read(
        nsid: u32,
        slba: u64,
        blocks: u32,
        lba_size: u32,
        addr: u64,
    ) -> Result<Self, crate::Error> {
        Self::rw(opcode::READ, nsid, slba, blocks, lba_size, addr)
    }

    /// Write (memory -> storage) of `blocks` blocks at `slba` from `addr`.
    pub fn write(
        nsid: u32,
        slba: u64,
        blocks: u32,
        lba_size: u32,
        addr: u64,
    ) -> Result<Self, crate::Error> {
        Self::rw(opcode::WRITE, nsid, slba, blocks, lba_size, addr)
    }

    /// Flush of namespace `nsid`: no data, command traffic only.
    pub fn flush(nsid: u32) -> Self {
        Self {
            opcode: opcode::FLUSH,
            nsid,
            ..Default::default()
        }
    }

    /// Identify with `cns` for `nsid` into a 4096-byte buffer at `addr`.
    pub fn identify(cns: u32, nsid: u32, addr: u64) -> Self {
        Self {
            opcode: opcode::ADMIN_IDENTIFY,
            nsid,
            addr,
            data_len: IDENTIFY_LEN as u32,
            cdw10: cns,
            ..Default::default()
        }
    }

    /// Format NVM of `nsid` to LBA format `lbaf` with no secure erase
    /// (SES = 0), no protection information and no separate metadata.
    pub fn format_nvm(nsid: u32, lbaf: u8) -> Self {
        let lbaf = u32::from(lbaf);
        Self {
            opcode: opcode::ADMIN_FORMAT_NVM,
            nsid,
            // LBAF bits 3:0, LBAFU (upper two bits of the index) bits 13:12;
            // MSET, PI, PIL and SES (bits 11:9) all zero.
            cdw10: (lbaf & 0xf) | ((lbaf >> 4) & 0x3) << 12,
            // Formatting can take a while on a real SSD.
            timeout_ms: 600_000,
            ..Default::default()
        }
    }

    /// Starting LBA (CDW11:CDW10).
    pub fn slba(&self) -> u64 {
        u64::from(self.cdw11) << 32 | u64::from(self.cdw10)
    }

    /// Blocks this Read/Write moves (NLB + 1).
    pub fn blocks(&self) -> u32 {
        (self.cdw12 & 0xffff) + 1
    }

    /// The 80-byte command area of a 128-byte io_uring SQE holding this
    /// command (`struct nvme_uring_cmd` is the first 72 bytes).
    pub fn to_uring_bytes(&self) -> [u8; 80] {
        let mut out = [0u8; 80];
        let words: [(usize, &[u8]); 18] = [
            (0, &[self.opcode]),
            (1, &[self.flags]),
            (2, &self.rsvd1.to_ne_bytes()),
            (4, &self.nsid.to_ne_bytes()),
            (8, &self.cdw2.to_ne_bytes()),
            (12, &self.cdw3.to_ne_bytes()),
            (16, &self.metadata.to_ne_bytes()),
            (24, &self.addr.to_ne_bytes()),
            (32, &self.metadata_len.to_ne_bytes()),
            (36, &self.data_len.to_ne_bytes()),
            (40, &self.cdw10.to_ne_bytes()),
            (44, &self.cdw11.to_ne_bytes()),
            (48, &self.cdw12.to_ne_bytes()),
            (52, &self.cdw13.to_ne_bytes()),
            (56, &self.cdw14.to_ne_bytes()),
            (60, &self.cdw15.to_ne_bytes()),
            (64, &self.timeout_ms.to_ne_bytes()),
            (68, &0u32.to_ne_bytes()),
        ];
        for (off, bytes) in words {
            out[off..off + bytes.len()].copy_from_slice(bytes);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Regression test for nvme-memload's bug: one block must be NLB 0.
    #[test]
    fn nlb_is_zero_based_single_block_is_nlb_0() {
        let c = PassthruCmd::read(1, 7, 1, 4096, 0x1000).unwrap();
        assert_eq!(c.cdw12, 0, "one block is NLB 0");
        assert_eq!(c.blocks(), 1);
        assert_eq!(c.data_len, 4096);
        let c = PassthruCmd::write(1, 7, 32, 512, 0x1000).unwrap();
        assert_eq!(c.cdw12, 31);
        assert_eq!(c.data_len, 32 * 512);
        assert_eq!(c.opcode, opcode::WRITE);
    }

    #[test]
    fn block_count_limits() {
        assert!(PassthruCmd::read(1, 0, 0, 512, 0).is_err());
        assert!(PassthruCmd::read(1, 0, 65537, 512, 0).is_err());
        let c = PassthruCmd::read(1, 0, 65536, 512, 0).unwrap();
        assert_eq!(c.cdw12, 0xffff);
    }

    #[test]
    fn slba_splits_into_two_dwords() {
        let c = PassthruCmd::read(3, 0x1_2345_6789, 1, 512, 0).unwrap();
        assert_eq!(c.cdw10, 0x2345_6789);
        assert_eq!(c.cdw11, 0x1);
        assert_eq!(c.slba(), 0x1_2345_6789);
        assert_eq!(c.nsid, 3);
    }

    #[test]
    fn flush_moves_nothing() {
        let c = PassthruCmd::flush(2);
        assert_eq!((c.opcode, c.nsid, c.data_len, c.addr), (0, 2, 0, 0));
    }

    #[test]
    fn format_has_no_secure_erase() {
        let c = PassthruCmd::format_nvm(1, 4);
        assert_eq!(c.cdw10, 4);
        assert_eq!(c.cdw10 >> 9 & 0x7, 0, "SES must be 0");
        let c = PassthruCmd::format_nvm(1, 0x13);
        assert_eq!(c.cdw10, 0x3 | 1 << 12);
    }

    #[test]
    fn uring_bytes_match_struct_layout() {
        let c = PassthruCmd::read(5, 0x10, 8, 512, 0xdead_beef).unwrap();
        let b = c.to_uring_bytes();
        // SAFETY: PassthruCmd is repr(C), 72 bytes of plain integers.
        let raw: [u8; 72] = unsafe { std::mem::transmute(c) };
        assert_eq!(&b[..68], &raw[..68]);
        assert_eq!(&b[68..], &[0u8; 12]);
    }
}
