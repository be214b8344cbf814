//! Result tables read as CSV (RFC 4180, by the `csv` crate): a header record, then one row per
//! record.
//!
//! Fields are trimmed; a field in double quotes (the quote its first character) may hold
//! commas, newlines and `""` for a quote; blank lines and lines starting with `#` are skipped.

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
    /// Text the CSV reader could not read (invalid UTF-8, say).
    #[error("line {line}: {reason}")]
    Unreadable {
        /// 1-based line number where the record starts.
        line: usize,
        /// What the reader said.
        reason: String,
    },
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
        let mut reader = csv::ReaderBuilder::new()
            .has_headers(false)
            .flexible(true)
            .trim(csv::Trim::All)
            .comment(Some(b'#'))
            .from_reader(text.as_bytes());
        let mut records = Vec::new();
        for record in reader.records() {
            let record = record.map_err(|e| TableError::Unreadable {
                line: e.position().map_or(0, |p| p.line() as usize),
                reason: e.to_string(),
            })?;
            let line = record.position().map_or(0, |p| p.line() as usize);
            let fields: Vec<String> = record.iter().map(str::to_string).collect();
            // A line of spaces is blank; an indented `#` line is a comment too.
            let blank = fields.iter().all(|f| f.is_empty()) && fields.len() == 1;
            if blank || (fields.len() == 1 && fields[0].starts_with('#')) {
                continue;
            }
            records.push((line, fields));
        }
        let mut records = records.into_iter();
        let (_, columns) = records.next().ok_or(TableError::Empty)?;
        let mut rows = Vec::new();
        for (line, fields) in records {
            if fields.len() != columns.len() {
                return Err(TableError::Ragged {
                    line,
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_reads_columns() {
        let t =
            Table::parse("# note\nn, name ,x\n\n  \n  # indented note\n1,a,2.5\n2,b,3\n").unwrap();
        assert_eq!(t.columns, ["n", "name", "x"]);
        assert_eq!(t.numbers("x").unwrap(), [2.5, 3.0]);
        assert_eq!(t.text("name").unwrap(), ["a", "b"]);
    }

    #[test]
    fn quoted_fields_keep_commas_quotes_and_newlines() {
        let t = Table::parse("a,b,c\n\"x, y\",\"say \"\"hi\"\"\",\n").unwrap();
        assert_eq!(t.rows, [["x, y", "say \"hi\"", ""]]);
        // A note over two lines, with a doubled quote, in the middle of a row; the next
        // row's line number counts the note's newline.
        let t = Table::parse(
            "clients,note,x\n1,\"first line\nsecond \"\"quoted\"\" line\",10\n2,plain,20\n3\n",
        )
        .unwrap_err();
        assert_eq!(
            t,
            TableError::Ragged {
                line: 5,
                expected: 3,
                found: 1
            }
        );
        let t =
            Table::parse("clients,note,x\r\n1,\"a\r\nb, \"\"c\"\"\",10\r\n2,plain,20\r\n").unwrap();
        assert_eq!(t.text("note").unwrap(), ["a\r\nb, \"c\"", "plain"]);
        assert_eq!(t.numbers("x").unwrap(), [10.0, 20.0]);
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
