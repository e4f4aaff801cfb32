//! The streaming side of pods, shared by devcluster's API server (`pods/exec`, `pods/attach`,
//! `pods/portforward`, `pods/log`) and by the kubelet API of devcluster's node agent (what a real
//! kube-apiserver asks of a kubelet: `/exec`, `/attach`, `/portForward`, `/containerLogs`).
//!
//! Each protocol is split in two: a core that works on a running container and plain channels
//! ([`exec::run`], [`attach::follow`], [`logs::read`], [`portforward::serve`]), and the transports
//! that carry those channels: WebSocket (in the API server, what kubectl speaks to it) and
//! SPDY/3.1 ([`remotecommand`], [`portforward`]: what a kube-apiserver speaks to a kubelet, and
//! kubectl's fallback).

pub mod attach;
pub mod conn;
pub mod exec;
pub mod logs;
pub mod portforward;
pub mod remotecommand;
pub mod spdy;
pub mod upgrade;
