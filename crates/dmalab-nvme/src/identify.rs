//! Identify Controller (CNS 01h) and Identify Namespace (CNS 00h) data
//! structures, parsed into what dmalab reports: model, serial, firmware,
//! MDTS, and the namespace's LBA formats with their relative performance and
//! the one in use (the view of the thesis' Figure 2.1, `nvme id-ns -H`).

use crate::cmd::IDENTIFY_LEN;
use serde::{Deserialize, Serialize};

fn le16(b: &[u8], off: usize) -> u16 {
    u16::from_le_bytes([b[off], b[off + 1]])
}

fn le32(b: &[u8], off: usize) -> u32 {
    u32::from_le_bytes([b[off], b[off + 1], b[off + 2], b[off + 3]])
}

fn le64(b: &[u8], off: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[off..off + 8]);
    u64::from_le_bytes(a)
}

/// An ASCII field, space padded on the right (NVMe strings are not
/// NUL-terminated); trailing spaces and NULs removed.
fn ascii(b: &[u8], off: usize, len: usize) -> String {
    String::from_utf8_lossy(&b[off..off + len])
        .trim_end_matches([' ', '\0'])
        .to_string()
}

/// Identify Controller, the fields dmalab uses and shows.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct IdController {
    /// PCI vendor id.
    pub vid: u16,
    /// PCI subsystem vendor id.
    pub ssvid: u16,
    /// Serial number.
    pub serial: String,
    /// Model number.
    pub model: String,
    /// Firmware revision.
    pub firmware: String,
    /// Maximum data transfer size as the raw field: a power of two in units
    /// of the controller's minimum memory page size (0: no limit).
    pub mdts: u8,
    /// Controller id.
    pub cntlid: u16,
    /// NVMe version (`major.minor.tertiary`).
    pub version: String,
    /// Number of namespaces.
    pub nn: u32,
    /// Optional NVM command support bit field (ONCS).
    pub oncs: u16,
    /// Volatile write cache field (bit 0: present). Without a volatile write
    /// cache a Flush has nothing to do.
    pub vwc: u8,
    /// NVM subsystem NVMe qualified name.
    pub subnqn: String,
}

impl IdController {
    /// Parses the 4096-byte Identify Controller data structure.
    pub fn parse(b: &[u8]) -> Result<Self, crate::Error> {
        if b.len() < IDENTIFY_LEN {
            return Err(crate::Error::BadIdentify(b.len()));
        }
        let ver = le32(b, 80);
        Ok(Self {
            vid: le16(b, 0),
            ssvid: le16(b, 2),
            serial: ascii(b, 4, 20),
            model: ascii(b, 24, 40),
            firmware: ascii(b, 64, 8),
            mdts: b[77],
            cntlid: le16(b, 78),
            version: format!("{}.{}.{}", ver >> 16, (ver >> 8) & 0xff, ver & 0xff),
            nn: le32(b, 516),
            oncs: le16(b, 520),
            vwc: b[525],
            subnqn: ascii(b, 768, 256),
        })
    }

    /// MDTS in bytes, assuming the minimum memory page size (CAP.MPSMIN) is
    /// 4 KiB, as on every controller dmalab has met (the register is not
    /// readable through passthrough). None: the controller sets no limit.
    pub fn mdts_bytes(&self) -> Option<u64> {
        (self.mdts != 0).then(|| 4096u64 << self.mdts.min(40))
    }
}

/// Relative performance of an LBA format, as Identify Namespace reports it
/// (LBAF bits 25:24).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RelativePerformance {
    /// 00b.
    Best,
    /// 01b.
    Better,
    /// 10b.
    Good,
    /// 11b.
    Degraded,
}

impl RelativePerformance {
    fn from_bits(rp: u8) -> Self {
        match rp & 3 {
            0 => Self::Best,
            1 => Self::Better,
            2 => Self::Good,
            _ => Self::Degraded,
        }
    }

    /// The raw two-bit value.
    pub fn bits(self) -> u8 {
        self as u8
    }

    /// How nvme-cli prints it.
    pub fn label(self) -> &'static str {
        match self {
            Self::Best => "Best",
            Self::Better => "Better",
            Self::Good => "Good",
            Self::Degraded => "Degraded",
        }
    }
}

/// One LBA format a namespace supports.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LbaFormat {
    /// Index (what `nvme format --lbaf` takes).
    pub index: u8,
    /// Logical block (data) size, bytes.
    pub data_size_bytes: u64,
    /// Metadata bytes per block.
    pub metadata_bytes: u16,
    /// LBADS, log2 of the data size, as Identify reports it.
    pub lbads: u8,
    /// Relative performance the controller expects of this format.
    pub relative_performance: RelativePerformance,
    /// True for the format the namespace is formatted with.
    pub in_use: bool,
}

/// Identify Namespace, the fields dmalab uses and shows.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct IdNamespace {
    /// Namespace size, logical blocks.
    pub nsze: u64,
    /// Namespace capacity, logical blocks.
    pub ncap: u64,
    /// Namespace utilisation, logical blocks.
    pub nuse: u64,
    /// Namespace features.
    pub nsfeat: u8,
    /// Number of LBA formats, zero-based (as the field is).
    pub nlbaf: u8,
    /// Formatted LBA size field (the index of the format in use and the
    /// metadata setting).
    pub flbas: u8,
    /// Metadata capabilities.
    pub mc: u8,
    /// End-to-end data protection capabilities.
    pub dpc: u8,
    /// End-to-end data protection type settings.
    pub dps: u8,
    /// The supported LBA formats, `nlbaf + 1` of them.
    pub lba_formats: Vec<LbaFormat>,
}

impl IdNamespace {
    /// Parses the 4096-byte Identify Namespace data structure.
    pub fn parse(b: &[u8]) -> Result<Self, crate::Error> {
        if b.len() < IDENTIFY_LEN {
            return Err(crate::Error::BadIdentify(b.len()));
        }
        let nlbaf = b[25];
        let flbas = b[26];
        let in_use = Self::format_index(nlbaf, flbas);
        let count = (usize::from(nlbaf) + 1).min(64);
        let lba_formats = (0..count)
            .map(|i| {
                let v = le32(b, 128 + 4 * i);
                let lbads = ((v >> 16) & 0xff) as u8;
                LbaFormat {
                    index: i as u8,
                    data_size_bytes: if (9..64).contains(&lbads) {
                        1u64 << lbads
                    } else {
                        0
                    },
                    metadata_bytes: (v & 0xffff) as u16,
                    lbads,
                    relative_performance: RelativePerformance::from_bits((v >> 24) as u8),
                    in_use: i == usize::from(in_use),
                }
            })
            .collect();
        Ok(Self {
            nsze: le64(b, 0),
            ncap: le64(b, 8),
            nuse: le64(b, 16),
            nsfeat: b[24],
            nlbaf,
            flbas,
            mc: b[27],
            dpc: b[28],
            dps: b[29],
            lba_formats,
        })
    }

    /// Index of the format in use: FLBAS bits 3:0, plus bits 6:5 as the
    /// upper bits when more than 16 formats exist.
    pub fn format_index(nlbaf: u8, flbas: u8) -> u8 {
        let low = flbas & 0xf;
        if nlbaf >= 16 {
            low | ((flbas >> 5) & 0x3) << 4
        } else {
            low
        }
    }

    /// The format in use.
    pub fn current_format(&self) -> Option<&LbaFormat> {
        self.lba_formats.iter().find(|f| f.in_use)
    }

    /// Logical block size in use, bytes (None if the format is not valid).
    pub fn lba_size(&self) -> Option<u64> {
        self.current_format()
            .map(|f| f.data_size_bytes)
            .filter(|&s| s >= 512)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn put(b: &mut [u8], off: usize, s: &[u8]) {
        b[off..off + s.len()].copy_from_slice(s);
    }

    #[test]
    fn parses_controller() {
        let mut b = vec![0u8; 4096];
        put(&mut b, 0, &0x1b36u16.to_le_bytes());
        put(&mut b, 2, &0x1af4u16.to_le_bytes());
        put(&mut b, 4, b"dmalab-serial       ");
        put(&mut b, 24, format!("{:<40}", "QEMU NVMe Ctrl").as_bytes());
        put(&mut b, 64, b"7.2.22  ");
        b[77] = 7;
        put(&mut b, 80, &0x0001_0400u32.to_le_bytes());
        put(&mut b, 516, &256u32.to_le_bytes());
        b[525] = 7;
        let c = IdController::parse(&b).unwrap();
        assert_eq!(c.vid, 0x1b36);
        assert_eq!(c.serial, "dmalab-serial");
        assert_eq!(c.model, "QEMU NVMe Ctrl");
        assert_eq!(c.firmware, "7.2.22");
        assert_eq!(c.mdts, 7);
        assert_eq!(c.mdts_bytes(), Some(512 * 1024));
        assert_eq!(c.version, "1.4.0");
        assert_eq!(c.nn, 256);
        assert_eq!(c.vwc, 7);
    }

    #[test]
    fn mdts_zero_is_unlimited() {
        assert_eq!(IdController::default().mdts_bytes(), None);
    }

    /// The thesis' SSD (Figure 2.1): 512 B "Good", 4096 B "Best", in use.
    #[test]
    fn parses_namespace_formats_and_the_one_in_use() {
        let mut b = vec![0u8; 4096];
        put(&mut b, 0, &1000u64.to_le_bytes());
        put(&mut b, 8, &1000u64.to_le_bytes());
        b[25] = 1; // two formats
        b[26] = 1; // format 1 in use
        put(&mut b, 128, &(9u32 << 16 | 2 << 24).to_le_bytes());
        put(&mut b, 132, &(12u32 << 16 | 64).to_le_bytes());
        let ns = IdNamespace::parse(&b).unwrap();
        assert_eq!(ns.nsze, 1000);
        assert_eq!(ns.lba_formats.len(), 2);
        let f0 = &ns.lba_formats[0];
        assert_eq!(
            (f0.data_size_bytes, f0.relative_performance, f0.in_use),
            (512, RelativePerformance::Good, false)
        );
        let f1 = &ns.lba_formats[1];
        assert_eq!(
            (
                f1.data_size_bytes,
                f1.metadata_bytes,
                f1.relative_performance
            ),
            (4096, 64, RelativePerformance::Best)
        );
        assert!(f1.in_use);
        assert_eq!(ns.lba_size(), Some(4096));
    }

    #[test]
    fn flbas_upper_bits_count_only_beyond_16_formats() {
        assert_eq!(IdNamespace::format_index(7, 0x24), 4);
        assert_eq!(IdNamespace::format_index(20, 0x21), 0x11);
    }

    #[test]
    fn short_buffer_is_an_error() {
        assert!(IdNamespace::parse(&[0u8; 100]).is_err());
        assert!(IdController::parse(&[0u8; 100]).is_err());
    }
}
