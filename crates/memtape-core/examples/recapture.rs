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
            if let Record::Time { ns } = record {
                time = ns;
            }
            events += u64::from(record.is_event());
            encoder.record(&record);
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
