//! Rewrites a capture file with this version's encoder: every record, blocks cut where
//! the recorder cuts them (256 KiB raw), each block starting with its time. Prints the
//! sizes, to compare encodings on a real recording.
//!
//! `cargo run --release -p memtape-core --example recapture -- IN.mtape OUT.mtape`

use memtape_core::capture::{BlockEncoder, CaptureFileWriter, CaptureReader, Record};

const BLOCK_TARGET: usize = 256 * 1024;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let (input, output) = (&args[1], &args[2]);
    let file = std::io::BufReader::new(std::fs::File::open(input).unwrap());
    let mut reader = CaptureReader::new(file).unwrap();
    let out = std::io::BufWriter::new(std::fs::File::create(output).unwrap());
    let mut writer = CaptureFileWriter::new(out, reader.metadata_json()).unwrap();
    let mut encoder = BlockEncoder::with_capacity(BLOCK_TARGET + 4096);
    let mut time = 0;
    let mut events = 0u64;
    let summary = reader
        .for_each_record(|record| {
            match record {
                Record::Alloc {
                    domain,
                    addr,
                    size,
                    stack,
                } => {
                    encoder.alloc(domain, addr, size, stack);
                    events += 1;
                }
                Record::Free { domain, addr } => {
                    encoder.free(domain, addr);
                    events += 1;
                }
                Record::Time { ns } => {
                    time = ns;
                    encoder.time(ns);
                }
                Record::String { id, value } => encoder.string(id, value),
                Record::Frame {
                    id,
                    filename,
                    name,
                    line,
                } => encoder.frame(id, filename, name, line),
                Record::Stack { id, parent, frame } => encoder.stack(id, parent, frame),
                Record::Marker { label } => encoder.marker(label),
                Record::Dropped { count } => encoder.dropped(count),
                Record::Module {
                    id,
                    path,
                    base,
                    build_id,
                    segments,
                } => {
                    let segments: Vec<(u64, u64)> = segments.iter().collect();
                    encoder.module(id, path, base, build_id, &segments);
                }
                Record::NativeFrame { id, module, offset } => {
                    encoder.native_frame(id, module, offset)
                }
            }
            if encoder.len() >= BLOCK_TARGET {
                writer.write_block(&encoder.take()).unwrap();
                encoder.time(time);
            }
        })
        .unwrap();
    writer.write_block(&encoder.take()).unwrap();
    let trailer = summary.trailer_json.unwrap_or_else(|| "{}".to_owned());
    let written = writer.bytes_written();
    writer.finish(&trailer).unwrap();
    let input_len = std::fs::metadata(input).unwrap().len();
    println!(
        "{events} events: {input} {input_len} bytes ({:.3} B/event) -> {output} {written} bytes ({:.3} B/event)",
        input_len as f64 / events as f64,
        written as f64 / events as f64
    );
}
