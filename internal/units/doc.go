// Package units parses and formats byte sizes ("512KiB", "10G", "1.5 GB") for
// configuration files, flags and tables.
package units
