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
            // Padded by hand: `{:<w$}` panics on a width over u16::MAX, and a cell can
            // hold text read from the fleet repo.
            .map(|(cell, w)| {
                let pad = w.saturating_sub(cell.chars().count());
                format!("{cell}{}", " ".repeat(pad))
            })
            .collect();
        text.push_str(cells.join("  ").trim_end());
        text.push('\n');
    }
    text
}

#[cfg(test)]
mod tests {
    use super::render;

    /// A cell wider than `{:<w$}` allows (65 535), as an annotation pushed to the fleet
    /// repo can make one, in the first column and the last: laid out, no panic.
    #[test]
    fn a_cell_wider_than_a_format_width_is_laid_out() {
        let wide = "x".repeat(70_000);
        let rows = [
            ["SPOKE".to_string(), "DETAIL".to_string()],
            [wide.clone(), "ok".to_string()],
            ["dev".to_string(), wide.clone()],
        ];
        let text = render(&rows);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], format!("SPOKE{}  DETAIL", " ".repeat(70_000 - 5)));
        assert_eq!(lines[1], format!("{wide}  ok"));
        assert_eq!(lines[2], format!("dev{}  {wide}", " ".repeat(70_000 - 3)));
    }

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
