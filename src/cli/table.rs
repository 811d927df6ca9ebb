//! The commands' tables: each column as wide as its widest cell (in characters), cells
//! separated by two spaces, no trailing blanks.

/// `rows` (the header first) as text, one line per row.
pub(crate) fn render<const N: usize>(rows: &[[String; N]]) -> String {
    let widths: Vec<usize> = (0..N)
        .map(|c| rows.iter().map(|r| r[c].chars().count()).max().unwrap_or(0))
        .collect();
    let mut text = String::new();
    for row in rows {
        let cells: Vec<String> = row
            .iter()
            .zip(&widths)
            .map(|(cell, w)| format!("{cell:<w$}"))
            .collect();
        text.push_str(cells.join("  ").trim_end());
        text.push('\n');
    }
    text
}

#[cfg(test)]
mod tests {
    use super::render;

    #[test]
    fn columns_fit_the_widest_cell_in_characters_without_trailing_blanks() {
        let rows = [
            ["SPOKE", "STATE", "DETAIL"].map(String::from),
            ["dev", "ok", ""].map(String::from),
            ["édge-1", "FAILED at seal", "x"].map(String::from),
        ];
        assert_eq!(
            render(&rows),
            "SPOKE   STATE           DETAIL\n\
             dev     ok\n\
             édge-1  FAILED at seal  x\n"
        );
        let none: [[String; 2]; 0] = [];
        assert_eq!(render(&none), "");
    }
}
