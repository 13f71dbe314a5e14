//! Elastic tabstops as Go's `text/tabwriter` lays them out, so that berth's tables and
//! `describe` output line up exactly like kubectl's and oc's.
//!
//! Text is cut into cells by `\t`; a cell is tab-terminated, so the last cell of a line
//! takes no part in the alignment. A column block is a run of consecutive lines that all
//! have a cell in that column; its width is the widest cell plus the padding. A line
//! without tabs ends every block.

/// How a [`TabWriter`] pads.
#[derive(Debug, Clone, Copy)]
pub struct Layout {
    /// Minimal width of a cell, padding included.
    pub min_width: usize,
    /// Width of a tab character when `pad_char` is `\t`.
    pub tab_width: usize,
    /// Added to the widest cell of a column.
    pub padding: usize,
    pub pad_char: char,
}

impl Layout {
    /// `kubectl get`: minwidth 6, tabwidth 4, padding 3, spaces.
    pub const TABLE: Layout = Layout {
        min_width: 6,
        tab_width: 4,
        padding: 3,
        pad_char: ' ',
    };
    /// `kubectl describe`: minwidth 0, tabwidth 8, padding 2, spaces.
    pub const DESCRIBE: Layout = Layout {
        min_width: 0,
        tab_width: 8,
        padding: 2,
        pad_char: ' ',
    };
    /// `oc rollout history`: tab padding at tab width 8, minimum padding 1.
    pub const TABS: Layout = Layout {
        min_width: 0,
        tab_width: 8,
        padding: 1,
        pad_char: '\t',
    };
}

/// Collects text and lays it out on [`TabWriter::finish`]. With `remember_widths`, the
/// column widths of one flush carry over to the next, so that lines printed later (a
/// watch) stay aligned with the header.
#[derive(Debug)]
pub struct TabWriter {
    layout: Layout,
    remember_widths: bool,
    remembered: Vec<usize>,
    /// Complete lines not yet laid out; each a list of cells.
    lines: Vec<Vec<String>>,
    /// Text of the current unfinished line.
    partial: String,
    out: String,
}

impl TabWriter {
    pub fn new(layout: Layout) -> Self {
        TabWriter {
            layout,
            remember_widths: false,
            remembered: Vec::new(),
            lines: Vec::new(),
            partial: String::new(),
            out: String::new(),
        }
    }

    /// Keep column widths across flushes (kubectl's `RememberWidths`).
    pub fn remember_widths(mut self) -> Self {
        self.remember_widths = true;
        self
    }

    /// Adds text; lines end at `\n`.
    pub fn write(&mut self, text: &str) {
        let mut rest = text;
        while let Some(i) = rest.find('\n') {
            self.partial.push_str(&rest[..i]);
            let line = std::mem::take(&mut self.partial);
            let cells: Vec<String> = line.split('\t').map(str::to_string).collect();
            let single = cells.len() == 1;
            self.lines.push(cells);
            if single {
                // A line without tabs ends every column block.
                self.flush();
            }
            rest = &rest[i + 1..];
        }
        self.partial.push_str(rest);
    }

    /// Lays out the lines collected so far and returns the text laid out since the last
    /// call.
    pub fn take(&mut self) -> String {
        self.flush();
        std::mem::take(&mut self.out)
    }

    /// Lays out everything, the unfinished last line too, and returns the whole text.
    pub fn finish(mut self) -> String {
        if !self.partial.is_empty() {
            let line = std::mem::take(&mut self.partial);
            self.lines
                .push(line.split('\t').map(str::to_string).collect());
            self.flush();
            // The unfinished line got a newline it never had.
            self.out.pop();
        }
        self.flush();
        self.out
    }

    fn flush(&mut self) {
        if self.lines.is_empty() {
            return;
        }
        let lines = std::mem::take(&mut self.lines);
        let mut widths = Vec::new();
        self.format(&lines, &mut widths, 0, lines.len());
    }

    /// Go's `format`: finds the column blocks of column `widths.len()` within
    /// `lines[start..end]` and recurses into the columns to their right.
    fn format(&mut self, lines: &[Vec<String>], widths: &mut Vec<usize>, start: usize, end: usize) {
        let column = widths.len();
        let mut printed = start;
        let mut this = start;
        while this < end {
            if column + 1 >= lines[this].len() {
                this += 1;
                continue;
            }
            self.write_lines(lines, widths, printed, this);
            let block = this;
            let mut width = self.layout.min_width;
            while this < end && column + 1 < lines[this].len() {
                width = width.max(cell_width(&lines[this][column]) + self.layout.padding);
                this += 1;
            }
            if self.remember_widths {
                if let Some(w) = self.remembered.get(column) {
                    width = width.max(*w);
                }
                if self.remembered.len() <= column {
                    self.remembered.resize(column + 1, 0);
                }
                self.remembered[column] = width;
            }
            widths.push(width);
            self.format(lines, widths, block, this);
            widths.pop();
            printed = this;
        }
        self.write_lines(lines, widths, printed, end);
    }

    fn write_lines(&mut self, lines: &[Vec<String>], widths: &[usize], start: usize, end: usize) {
        for line in &lines[start..end] {
            for (j, cell) in line.iter().enumerate() {
                self.out.push_str(cell);
                if j < widths.len() && j + 1 < line.len() {
                    self.pad(cell_width(cell), widths[j]);
                }
            }
            self.out.push('\n');
        }
    }

    fn pad(&mut self, text: usize, cell: usize) {
        if self.layout.pad_char == '\t' {
            let tab = self.layout.tab_width.max(1);
            let cell = cell.div_ceil(tab) * tab;
            let n = cell.saturating_sub(text);
            for _ in 0..n.div_ceil(tab) {
                self.out.push('\t');
            }
        } else {
            for _ in 0..cell.saturating_sub(text) {
                self.out.push(self.layout.pad_char);
            }
        }
    }
}

fn cell_width(cell: &str) -> usize {
    cell.chars().count()
}

/// Lays out `text` in one go.
pub fn align(layout: Layout, text: &str) -> String {
    let mut w = TabWriter::new(layout);
    w.write(text);
    w.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_table_lines_up_like_kubectl_get() {
        let text = "NAME\tREADY\tSTATUS\tRESTARTS\tAGE\nweb-1\t1/1\tRunning\t0\t5s\nx\t0/1\tContainerCreating\t0\t12m\n";
        assert_eq!(
            align(Layout::TABLE, text),
            "NAME    READY   STATUS              RESTARTS   AGE\n\
             web-1   1/1     Running             0          5s\n\
             x       0/1     ContainerCreating   0          12m\n"
        );
    }

    #[test]
    fn tab_padding_fills_to_the_next_tab_stop() {
        // oc rollout history: REVISION is 8 wide, so one padding makes the column 16.
        let text = "REVISION\tSTATUS\tCAUSE\n1\tComplete\tconfig change\n";
        assert_eq!(
            align(Layout::TABS, text),
            "REVISION\tSTATUS\t\tCAUSE\n1\t\tComplete\tconfig change\n"
        );
    }

    #[test]
    fn a_line_without_tabs_ends_the_column_blocks() {
        let text = "Name:\tx\nLabels:\tapp=y\nEvents:\nType\tReason\nNormal\tScheduled\n";
        assert_eq!(
            align(Layout::DESCRIBE, text),
            "Name:    x\nLabels:  app=y\nEvents:\nType    Reason\nNormal  Scheduled\n"
        );
    }

    #[test]
    fn nested_blocks_are_aligned_each_on_its_own() {
        // The indented lines have one more leading cell; their block is separate.
        let text = "A:\t1\n\tBb:\t2\n\tC:\t3\nDdddd:\t4\n";
        assert_eq!(
            align(Layout::DESCRIBE, text),
            "A:      1\n        Bb:  2\n        C:   3\nDdddd:  4\n"
        );
    }

    #[test]
    fn remembered_widths_keep_later_lines_aligned_with_the_header() {
        let mut w = TabWriter::new(Layout::TABLE).remember_widths();
        w.write("NAME\tAGE\nlong-name-here\t1s\n");
        let first = w.take();
        w.write("a\t2s\n");
        let second = w.take();
        assert_eq!(first, "NAME             AGE\nlong-name-here   1s\n");
        assert_eq!(second, "a                2s\n");
    }

    #[test]
    fn an_unfinished_last_line_is_kept_without_a_newline() {
        assert_eq!(align(Layout::DESCRIBE, "a\tb\nc\td"), "a  b\nc  d");
        assert_eq!(align(Layout::DESCRIBE, ""), "");
    }
}
