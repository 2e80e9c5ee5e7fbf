package eval

// Section is an item's result as the report shows it: figures beside the paper's
// finding, tables, and the numbers the closing note quotes.
type Section struct {
	Item  string
	Title string
	// Paper is the paper's finding this section reproduces (one paragraph, HTML-escaped
	// by the report).
	Paper     string
	Meta      *Meta
	Figures   []Figure
	Tables    []Table
	Headlines []Headline
}

// Figure is one SVG of a section.
type Figure struct {
	// File is the file name in the report directory, prefixed with the item.
	File    string
	Title   string
	Caption string
	SVG     string
}

// Table is a table of a section; cells are preformatted.
type Table struct {
	Title  string
	Header []string
	Rows   [][]string
	Note   string
}

// Headline is one number of the closing note: what, ours, and the paper's.
type Headline struct {
	Name  string `json:"name"`
	Value string `json:"value"`
	Paper string `json:"paper,omitempty"`
}

// Sectioner is an item's result.
type Sectioner interface {
	Section() Section
}
