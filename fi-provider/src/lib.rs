//! libfabric provider for droce.
//!
//! Empty on purpose: the provider (FI_EP_MSG over RC, FI_EP_DGRAM over UD, FI_EP_RDM through
//! ofi_rxm) is issue 5 and needs the device-on-a-port work of issue 4 first. Nothing here is
//! exported, so no libfabric ever loads this crate and mistakes it for a working provider.
