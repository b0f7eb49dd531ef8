//! Snapshots the tests write: a tiny one with every action, and synthetic big ones.

use super::pickle_decoder::Value;
use crate::event::{Action, Event, HOST_DEVICE};
use crate::memory_snapshot::{MemorySnapshot, ResolvedFrame, SegmentState};
use crate::stack_table::StackId;

pub(super) fn frame(name: &str, line: u32) -> ResolvedFrame {
    ResolvedFrame {
        filename: "/app/train.py".into(),
        name: name.into(),
        line,
    }
}

pub(super) fn event(
    action: Action,
    addr: u64,
    size: u64,
    device: i32,
    stack: StackId,
    op: u32,
) -> Event {
    Event {
        action,
        addr,
        size,
        requested_size: size,
        device,
        stream: 0,
        thread: 1,
        time_ns: 1_700_000_000_000_000_123,
        stack,
        op,
    }
}

/// Host events, devices 0 and 1, all seven framework actions, ops and no ops.
pub(super) fn tiny() -> MemorySnapshot {
    let mut snapshot = MemorySnapshot {
        op_names: vec![String::new(), "matmul".into(), "add".into()],
        ..MemorySnapshot::default()
    };
    snapshot
        .stacks
        .insert(1, vec![frame("f", 10), frame("main", 3)]);
    snapshot.stacks.insert(2, vec![frame("g", 20)]);
    snapshot.events = vec![
        event(Action::Alloc, 0x1000, 64, HOST_DEVICE, 1, 0),
        event(Action::AllocNew, 0xA000, 4096, 0, 1, 1),
        event(Action::AllocReuse, 0xB000, 512, 1, 2, 2),
        event(Action::FreeActiveToCache, 0xB000, 512, 1, 0, 0),
        event(Action::AllocMakeBuffer, 0xC000, 256, 1, 0, 2),
        event(Action::Release, 0xC000, 256, 1, 0, 0),
        event(Action::FreeCacheToOs, 0xB000, 512, 1, 0, 0),
        event(Action::FreeActiveToOs, 0xA000, 4096, 0, 0, 0),
        event(Action::Free, 0x1000, 64, HOST_DEVICE, 0, 0),
    ];
    snapshot.segments = vec![
        SegmentState {
            device: 1,
            addr: 0xD000,
            size: 1024,
            requested_size: 1000,
            stream: 7,
            active: true,
            stack: 2,
            op: 2,
        },
        SegmentState {
            device: 0,
            addr: 0xE000,
            size: 2048,
            requested_size: 2000,
            stream: 0,
            active: false,
            stack: 1,
            op: 0,
        },
        SegmentState {
            device: 1,
            addr: 0x9000,
            size: 128,
            requested_size: 100,
            stream: 0,
            active: true,
            stack: 0,
            op: 0,
        },
    ];
    snapshot
}

pub(super) fn actions(trace: &Value) -> Vec<&str> {
    trace.list().iter().map(|e| e.at("action").str()).collect()
}

/// `(action, addr, size)` of every entry of a trace.
pub(super) fn entries(trace: &Value) -> Vec<(&str, i64, i64)> {
    trace
        .list()
        .iter()
        .map(|e| (e.at("action").str(), e.at("addr").int(), e.at("size").int()))
        .collect()
}

/// `events` events on the host and devices 0 and 1, `stacks` stacks of 16 frames.
pub(super) fn synthetic(events: usize, stacks: u32) -> MemorySnapshot {
    let mut snapshot = MemorySnapshot {
        op_names: vec![
            String::new(),
            "matmul".into(),
            "conv2d".into(),
            "add".into(),
        ],
        ..MemorySnapshot::default()
    };
    for stack in 1..=stacks {
        let frames = (0..16)
            .map(|depth| ResolvedFrame {
                filename: format!("/home/user/project/pkg/module_{}.py", depth % 5),
                name: format!("function_{stack}_{depth}"),
                line: 10 + depth,
            })
            .collect();
        snapshot.stacks.insert(stack, frames);
    }
    let framework = [
        Action::AllocNew,
        Action::AllocReuse,
        Action::FreeActiveToCache,
        Action::FreeActiveToOs,
    ];
    for i in 0..events {
        let n = i as u64;
        let (action, device) = match i % 4 {
            0 => (Action::Alloc, HOST_DEVICE),
            1 => (Action::Free, HOST_DEVICE),
            _ => (framework[(i / 4) % 4], (i % 2) as i32),
        };
        let mut e = event(
            action,
            0x7f00_0000_0000 + (n % 4096) * 256,
            64 + n % 8192,
            device,
            (n % u64::from(stacks)) as u32 + 1,
            (n % 4) as u32,
        );
        e.time_ns = 1_700_000_000_000_000_000 + n * 1000;
        snapshot.events.push(e);
    }
    snapshot
}
