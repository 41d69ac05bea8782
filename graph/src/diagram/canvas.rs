//! The drawing surface of the diagram: characters, plus the directions of
//! lines through each cell, turned into rounded box-drawing characters at
//! the end so that crossing and joining lines pick the right glyph.

/// A line leaves the cell upwards.
pub const UP: u8 = 1;
/// A line leaves the cell downwards.
pub const DOWN: u8 = 2;
/// A line leaves the cell to the left.
pub const LEFT: u8 = 4;
/// A line leaves the cell to the right.
pub const RIGHT: u8 = 8;

/// A grid of characters plus line directions, turned into box-drawing
/// characters when the picture is finished.
pub struct Canvas {
    columns: usize,
    chars: Vec<Vec<char>>,
    lines: Vec<Vec<u8>>,
}

impl Canvas {
    pub fn new(columns: usize) -> Self {
        Self {
            columns,
            chars: Vec::new(),
            lines: Vec::new(),
        }
    }

    fn ensure(&mut self, row: usize) {
        while self.chars.len() <= row {
            self.chars.push(vec![' '; self.columns]);
            self.lines.push(vec![0; self.columns]);
        }
    }

    pub fn put(&mut self, row: usize, col: usize, c: char) {
        self.ensure(row);
        if col < self.columns {
            self.chars[row][col] = c;
        }
    }

    pub fn line(&mut self, row: usize, col: usize, bits: u8) {
        self.ensure(row);
        if col < self.columns {
            self.lines[row][col] |= bits;
        }
    }

    pub fn draw_box(&mut self, y: usize, left: usize, label: &str, double: bool) {
        let inner = label.chars().count() + 2;
        let rule = if double { '═' } else { '─' };
        let top: String = std::iter::once('╭')
            .chain(std::iter::repeat_n(rule, inner))
            .chain(std::iter::once('╮'))
            .collect();
        let bottom: String = std::iter::once('╰')
            .chain(std::iter::repeat_n(rule, inner))
            .chain(std::iter::once('╯'))
            .collect();
        let middle = format!("│ {label} │");
        for (r, text) in [top, middle, bottom].iter().enumerate() {
            for (i, c) in text.chars().enumerate() {
                self.put(y + r, left + i, c);
            }
        }
    }

    pub fn finish(self) -> String {
        let mut text = String::new();
        for (chars, lines) in self.chars.into_iter().zip(self.lines) {
            let row: String = chars
                .into_iter()
                .zip(lines)
                .map(|(c, bits)| {
                    if c == ' ' && bits != 0 {
                        glyph(bits)
                    } else {
                        c
                    }
                })
                .collect();
            text.push_str(row.trim_end());
            text.push('\n');
        }
        text
    }
}

/// The rounded box-drawing character joining the given directions.
fn glyph(bits: u8) -> char {
    match bits {
        b if b == UP | DOWN || b == UP || b == DOWN => '│',
        b if b == LEFT | RIGHT || b == LEFT || b == RIGHT => '─',
        b if b == UP | RIGHT => '╰',
        b if b == UP | LEFT => '╯',
        b if b == DOWN | RIGHT => '╭',
        b if b == DOWN | LEFT => '╮',
        b if b == UP | DOWN | RIGHT => '├',
        b if b == UP | DOWN | LEFT => '┤',
        b if b == LEFT | RIGHT | DOWN => '┬',
        b if b == LEFT | RIGHT | UP => '┴',
        _ => '┼',
    }
}
