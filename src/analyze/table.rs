//! A small CSV reader for result tables: a header line, then one row per line.
//!
//! Tables from benchmark write-ups and stairbench's steps.csv have no embedded newlines, so a
//! line-based reader suffices; fields are trimmed, a quoted field may hold commas and `""`,
//! blank lines and lines starting with `#` are skipped.

/// A parsed table.
#[derive(Debug, Clone, PartialEq)]
pub struct Table {
    /// Column names, from the header line.
    pub columns: Vec<String>,
    /// Rows of fields, each as long as `columns`.
    pub rows: Vec<Vec<String>>,
}

/// What was wrong with a table.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum TableError {
    /// No header line.
    #[error("the table is empty: expected a header line of column names")]
    Empty,
    /// A row with the wrong number of fields.
    #[error(
        "line {line} has {found} fields but the header has {expected}: fix the row or the header"
    )]
    Ragged {
        /// 1-based line number.
        line: usize,
        /// Fields in the header.
        expected: usize,
        /// Fields in the row.
        found: usize,
    },
    /// A column that does not exist.
    #[error("no column named {name:?}; the columns are: {}", .available.join(", "))]
    UnknownColumn {
        /// The column asked for.
        name: String,
        /// The columns that exist.
        available: Vec<String>,
    },
    /// A field that should be a number.
    #[error("column {column:?}, row {row}: {value:?} is not a number")]
    NotANumber {
        /// The column.
        column: String,
        /// 1-based data row.
        row: usize,
        /// The field.
        value: String,
    },
}

impl Table {
    /// Parses CSV text.
    pub fn parse(text: &str) -> Result<Table, TableError> {
        let mut lines = text
            .lines()
            .enumerate()
            .filter(|(_, l)| !l.trim().is_empty() && !l.trim_start().starts_with('#'));
        let (_, header) = lines.next().ok_or(TableError::Empty)?;
        let columns = split(header);
        let mut rows = Vec::new();
        for (index, line) in lines {
            let fields = split(line);
            if fields.len() != columns.len() {
                return Err(TableError::Ragged {
                    line: index + 1,
                    expected: columns.len(),
                    found: fields.len(),
                });
            }
            rows.push(fields);
        }
        Ok(Table { columns, rows })
    }

    /// The index of column `name`.
    pub fn index(&self, name: &str) -> Result<usize, TableError> {
        self.columns
            .iter()
            .position(|c| c == name)
            .ok_or_else(|| TableError::UnknownColumn {
                name: name.to_string(),
                available: self.columns.clone(),
            })
    }

    /// Column `name` as text.
    pub fn text(&self, name: &str) -> Result<Vec<String>, TableError> {
        let i = self.index(name)?;
        Ok(self.rows.iter().map(|r| r[i].clone()).collect())
    }

    /// Column `name` as numbers.
    pub fn numbers(&self, name: &str) -> Result<Vec<f64>, TableError> {
        let i = self.index(name)?;
        self.rows
            .iter()
            .enumerate()
            .map(|(row, r)| {
                r[i].parse::<f64>().map_err(|_| TableError::NotANumber {
                    column: name.to_string(),
                    row: row + 1,
                    value: r[i].clone(),
                })
            })
            .collect()
    }
}

/// Splits one CSV line: fields are trimmed; a field in double quotes may hold commas, and `""`
/// inside it is one quote (as stairbench's own steps.csv writes names and reasons).
fn split(line: &str) -> Vec<String> {
    let mut fields = Vec::new();
    let mut field = String::new();
    let mut quoted = false;
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match (c, quoted) {
            ('"', true) if chars.peek() == Some(&'"') => {
                field.push('"');
                chars.next();
            }
            ('"', true) => quoted = false,
            ('"', false) if field.trim().is_empty() => {
                field.clear();
                quoted = true;
            }
            (',', false) => fields.push(std::mem::take(&mut field).trim().to_string()),
            _ => field.push(c),
        }
    }
    fields.push(field.trim().to_string());
    fields
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_reads_columns() {
        let t = Table::parse("# note\nn, \"name\" ,x\n\n1,a,2.5\n2,b,3\n").unwrap();
        assert_eq!(t.columns, ["n", "name", "x"]);
        assert_eq!(t.numbers("x").unwrap(), [2.5, 3.0]);
        assert_eq!(t.text("name").unwrap(), ["a", "b"]);
    }

    #[test]
    fn quoted_fields_keep_commas_and_quotes() {
        let t = Table::parse("a,b,c\n\"x, y\",\"say \"\"hi\"\"\",\n").unwrap();
        assert_eq!(t.rows, [["x, y", "say \"hi\"", ""]]);
    }

    #[test]
    fn errors_name_the_problem() {
        assert_eq!(Table::parse(" \n"), Err(TableError::Empty));
        let err = Table::parse("a,b\n1,2\n3\n").unwrap_err();
        assert_eq!(
            err,
            TableError::Ragged {
                line: 3,
                expected: 2,
                found: 1
            }
        );
        let t = Table::parse("a,b\n1,x\n").unwrap();
        let err = t.numbers("c").unwrap_err().to_string();
        assert!(err.contains("\"c\"") && err.contains("a, b"), "{err}");
        let err = t.numbers("b").unwrap_err().to_string();
        assert!(err.contains("\"x\" is not a number"), "{err}");
    }
}
