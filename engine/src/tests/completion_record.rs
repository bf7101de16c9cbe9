//! The completion record the engine writes last, the same for every kind: which job made
//! the output (kind, release, fingerprint, pinned inputs) and every final output file
//! the kind declared at finish, with its size and blake3, under the kind's final
//! directories.

use crate::completion::{self, Completion, OutputFile, RELEASE};

use super::bed::Bed;

#[tokio::test]
async fn the_record_lists_the_kinds_final_files_with_their_digests() {
    let mut bed = Bed::new(3).await;
    bed.complete_all("w1").await;
    bed.assert_finished_as_expected();
    let Completion::Complete { marker, record } = completion::read(&bed.output).await.unwrap()
    else {
        panic!("no completion record");
    };
    assert_eq!(marker, "_SUCCESS");
    assert_eq!(
        (record.kind.as_str(), record.release.as_str()),
        ("word_count", RELEASE)
    );
    assert_eq!(record.inputs.len(), 3);
    let outputs = record.outputs.expect("a file list");
    assert_eq!(outputs.dirs, Vec::<String>::new());
    let counts = std::fs::read(bed.out("word_counts.tsv")).unwrap();
    assert_eq!(
        outputs.files,
        vec![OutputFile::of("word_counts.tsv", &counts)]
    );
}
