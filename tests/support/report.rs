//! Samples through the report stage exactly as the pipeline streams them ([`ProfileBuilder`]), with the text of
//! perf_script.out collected in memory.

use profcpu::repeats::Echo;
use profcpu::report::profile::{Profile, ProfileBuilder, ReportOptions};
use profcpu::report::script::RenderedStack;
use profcpu::report::Weight;
use profcpu::symbolize::ResolvedSample;

pub struct Rendered {
    /// perf_script.out's text.
    pub script: String,
    pub profile: Profile,
}

impl Rendered {
    /// folded_stacks.out's text (checking the repeats it comes with: each echo's bytes are the same as those it
    /// points back to).
    pub fn folded(&self) -> String {
        let mut out = Vec::new();
        let mut echoes = Vec::new();
        let write = |piece: &[u8], piece_echoes: &[Echo]| -> Result<(), ()> {
            out.extend_from_slice(piece);
            echoes.extend_from_slice(piece_echoes);
            Ok(())
        };
        self.profile.folded.write_in_pieces(1 << 10, write).unwrap();
        assert_eq!(out.len() as u64, self.profile.folded.text_len(), "the folded file is as long as said");
        for e in &echoes {
            let (at, from, len) = (e.at as usize, e.from as usize, e.len as usize);
            assert!(from < at && at + len <= out.len() && out[at..at + len] == out[from..from + len], "{e:?}");
        }
        String::from_utf8(out).unwrap()
    }
}

pub fn render<'a>(samples: impl IntoIterator<Item = &'a ResolvedSample>, opts: &ReportOptions) -> Rendered {
    let mut builder = ProfileBuilder::new(opts);
    let mut script = Vec::new();
    let (mut text, mut lines) = (Vec::new(), Vec::new());
    for sample in samples {
        text.clear();
        lines.clear();
        match builder.add(&mut sample.clone(), &mut text, None, &mut lines) {
            Some(RenderedStack::Shared(stack)) => {
                script.extend_from_slice(&text);
                script.extend_from_slice(&stack.text);
            }
            // The stack's text follows the header in `text`.
            Some(RenderedStack::Appended(_)) => script.extend_from_slice(&text),
            None => {}
        }
    }
    Rendered { script: String::from_utf8(script).unwrap(), profile: builder.finish() }
}

/// The whole profile with the default view, weighted as given.
pub fn render_weighted(samples: &[ResolvedSample], weight: Weight) -> Rendered {
    render(samples, &ReportOptions { weight, ..ReportOptions::default() })
}
