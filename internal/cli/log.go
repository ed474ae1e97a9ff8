package cli

import (
	"fmt"
	"io"
	"log/slog"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// Log formats --log-format accepts. Both carry the same fields: text is
// slog's key=value lines, json one object per line (time, level, msg,
// then the record's attributes), for log shippers.
const (
	LogText = "text"
	LogJSON = "json"
)

// LogFormats lists the --log-format values.
var LogFormats = []string{LogText, LogJSON}

// logFormat is a pflag.Value refusing anything but LogFormats, so a typo
// is a usage error at parse time rather than a silent text log.
type logFormat string

func (f *logFormat) String() string { return string(*f) }
func (f *logFormat) Type() string   { return "format" }
func (f *logFormat) Set(s string) error {
	for _, v := range LogFormats {
		if strings.EqualFold(s, v) {
			*f = logFormat(v)
			return nil
		}
	}
	return fmt.Errorf("want %s", strings.Join(LogFormats, " or "))
}

var _ pflag.Value = (*logFormat)(nil)

// LogFormatFlag adds --log-format to cmd and returns where the parsed
// value lands (LogText unless given).
func LogFormatFlag(cmd *cobra.Command) *string {
	f := logFormat(LogText)
	cmd.Flags().Var(&f, "log-format", "log format on stderr: text or json (one object per line, same fields)")
	FlagValues(cmd, "log-format", LogFormats...)
	return (*string)(&f)
}

// NewLogger builds the logger every long-running command uses: format
// is LogText or LogJSON (anything else is text), level the minimum level.
func NewLogger(w io.Writer, format string, level slog.Leveler) *slog.Logger {
	opts := &slog.HandlerOptions{Level: level}
	if format == LogJSON {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

// LogFlags adds -v and --log-format to cmd and returns a function that
// builds the logger they ask for, writing to cmd's stderr.
func LogFlags(cmd *cobra.Command) func() *slog.Logger {
	verbose := cmd.Flags().BoolP("verbose", "v", false, "debug logs")
	format := LogFormatFlag(cmd)
	return func() *slog.Logger {
		level := slog.LevelInfo
		if *verbose {
			level = slog.LevelDebug
		}
		return NewLogger(cmd.ErrOrStderr(), *format, level)
	}
}
