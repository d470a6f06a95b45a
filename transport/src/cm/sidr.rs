//! Service ID Resolution for UD (IBA 12.11): SIDR_REQ (attribute 0x0017, table 119) asks the
//! passive side for the QPN and Q_Key behind a service ID; SIDR_REP (0x0018, table 120)
//! answers. rdma_cm uses it for RDMA_PS_UDP / RDMA_PS_IPOIB ids (`rdma_connect` on a UD id).

pub use self::rep::SidrRepRepr;
pub use self::req::SidrReqRepr;

/// SIDR_REQ. CM byte offsets: 0 Request ID(32), 4 P_Key(16) reserved(16), 8 ServiceID(64),
/// 16 private data (216 bytes).
pub mod req {
    use crate::cm::H;
    use crate::types::PKey;

    /// Size of SIDR_REQ private data.
    pub const PRIVATE_DATA_LEN: usize = 216;

    cm_view! {
        request_id, set_request_id: u32 => u32(H);
        pkey, set_pkey: u16 => u16(H + 4);
        service_id, set_service_id: u64 => u64(H + 8);
        private_data, set_private_data: [u8; PRIVATE_DATA_LEN] => bytes(H + 16, PRIVATE_DATA_LEN);
    }

    /// A SIDR_REQ as plain data.
    #[derive(Debug, Clone, PartialEq, Eq, Hash)]
    pub struct SidrReqRepr {
        pub request_id: u32,
        pub pkey: PKey,
        pub service_id: u64,
        pub private_data: [u8; PRIVATE_DATA_LEN],
    }

    impl SidrReqRepr {
        pub fn parse<T: AsRef<[u8]>>(p: &Packet<T>) -> Self {
            SidrReqRepr {
                request_id: p.request_id(),
                pkey: PKey(p.pkey()),
                service_id: p.service_id(),
                private_data: p.private_data(),
            }
        }

        /// Writes the body; reserved bits become zero. The buffer must hold a whole MAD.
        pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut Packet<T>) {
            p.clear_body();
            p.set_request_id(self.request_id);
            p.set_pkey(self.pkey.0);
            p.set_service_id(self.service_id);
            p.set_private_data(self.private_data);
        }
    }
}

/// SIDR_REP. CM byte offsets: 0 Request ID(32), 4 Status(8), 5 Additional Info Length(8),
/// 6 reserved(16), 8 QPN(24) reserved(8), 12 ServiceID(64), 20 Q_Key(32),
/// 24 Class Port Info / additional info (72 bytes), 96 private data (136 bytes).
pub mod rep {
    use crate::cm::H;
    use crate::types::{QKey, Qpn};

    /// Size of SIDR_REP private data.
    pub const PRIVATE_DATA_LEN: usize = 136;
    /// Size of the additional information field.
    pub const INFO_LEN: usize = 72;

    /// SIDR_REP status (IBA table 121; Linux `enum ib_cm_sidr_status`).
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    pub struct SidrStatus(pub u8);

    impl SidrStatus {
        pub const SUCCESS: Self = Self(0);
        pub const UNSUPPORTED: Self = Self(1);
        pub const REJECT: Self = Self(2);
        pub const NO_QP: Self = Self(3);
        pub const REDIRECT: Self = Self(4);
        pub const UNSUPPORTED_VERSION: Self = Self(5);
    }

    cm_view! {
        request_id, set_request_id: u32 => u32(H);
        status, set_status: u8 => u8(H + 4);
        info_len, set_info_len: u8 => u8(H + 5);
        qpn, set_qpn: u32 => bits32(H + 8, 8, 24);
        service_id, set_service_id: u64 => u64(H + 12);
        qkey, set_qkey: u32 => u32(H + 20);
        info, set_info: [u8; INFO_LEN] => bytes(H + 24, INFO_LEN);
        private_data, set_private_data: [u8; PRIVATE_DATA_LEN] => bytes(H + 96, PRIVATE_DATA_LEN);
    }

    /// A SIDR_REP as plain data.
    #[derive(Debug, Clone, PartialEq, Eq, Hash)]
    pub struct SidrRepRepr {
        pub request_id: u32,
        pub status: SidrStatus,
        pub info_len: u8,
        pub qpn: Qpn,
        pub service_id: u64,
        pub qkey: QKey,
        pub info: [u8; INFO_LEN],
        pub private_data: [u8; PRIVATE_DATA_LEN],
    }

    impl SidrRepRepr {
        pub fn parse<T: AsRef<[u8]>>(p: &Packet<T>) -> Self {
            SidrRepRepr {
                request_id: p.request_id(),
                status: SidrStatus(p.status()),
                info_len: p.info_len(),
                qpn: Qpn::new(p.qpn()),
                service_id: p.service_id(),
                qkey: QKey(p.qkey()),
                info: p.info(),
                private_data: p.private_data(),
            }
        }

        /// Writes the body; reserved bits become zero. The buffer must hold a whole MAD.
        pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut Packet<T>) {
            p.clear_body();
            p.set_request_id(self.request_id);
            p.set_status(self.status.0);
            p.set_info_len(self.info_len);
            p.set_qpn(self.qpn.value());
            p.set_service_id(self.service_id);
            p.set_qkey(self.qkey.0);
            p.set_info(self.info);
            p.set_private_data(self.private_data);
        }
    }
}
