package main

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/shardmover/shardmover/metadata"
)

// Bad input is refused before any connection is made, with one sentence that
// says what is wrong and what to do, and exit code 2 (docs/design.md
// section 11). This file holds the checks that are not one flag's own.

// flagError turns pflag's parse errors into one sentence naming the flag,
// what it expects, and where the flags are listed.
func flagError(cmd *cobra.Command, err error) error {
	help := fmt.Sprintf("run `%s --help` for its flags", cmd.CommandPath())
	var (
		inv *pflag.InvalidValueError
		req *pflag.ValueRequiredError
		nex *pflag.NotExistError
		syn *pflag.InvalidSyntaxError
	)
	switch {
	case errors.As(err, &inv):
		f := inv.GetFlag()
		what := expects(f.Value.Type())
		if errors.Is(err, strconv.ErrRange) {
			return usagef("--%s %s is out of range for %s; %s", f.Name, quote(inv.GetValue()), what, help)
		}
		return usagef("--%s %s is not %s; %s", f.Name, quote(inv.GetValue()), what, help)
	case errors.As(err, &req):
		return usagef("--%s needs a value: %s; %s", req.GetFlag().Name, expects(req.GetFlag().Value.Type()), help)
	case errors.As(err, &nex):
		short := nex.GetSpecifiedShortnames()
		if _, perr := strconv.ParseFloat(short, 64); short != "" && perr == nil {
			return usagef("-%s is not accepted: ids, counts and sizes are positive numbers; %s", short, help)
		}
		if short != "" {
			return usagef("unknown flag -%s in -%s; %s", nex.GetSpecifiedName(), short, help)
		}
		return usagef("unknown flag --%s for %s; %s", nex.GetSpecifiedName(), cmd.CommandPath(), help)
	case errors.As(err, &syn):
		return usagef("%q is not a flag (flags are written --name or --name=value); %s", syn.GetSpecifiedFlag(), help)
	}
	return usagef("%v; %s", err, help)
}

// expects says in words what a flag of a pflag type takes.
func expects(typ string) string {
	switch typ {
	case "int", "int8", "int16", "int32", "int64", "uint", "uint8", "uint16", "uint32", "uint64":
		return "a whole number"
	case "int64Slice", "int32Slice", "intSlice", "uintSlice":
		return "a whole number (or several, comma-separated)"
	case "float32", "float64":
		return "a number"
	case "duration":
		return "a duration like 30s, 5m or 1h30m"
	case "bool":
		return "true or false"
	}
	return "a value of type " + typ
}

// strictArgs makes every command's positional-argument errors usage errors
// (exit 2) that name the command, and makes the commands that only group
// others (node, table, sandbox, jobs, the root) refuse an unknown
// subcommand instead of printing their help and exiting 0.
func strictArgs(root *cobra.Command) {
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		switch {
		case c.Args != nil:
			orig := c.Args
			c.Args = func(cmd *cobra.Command, args []string) error {
				err := orig(cmd, args)
				var u *usageError
				if err == nil || errors.As(err, &u) {
					return err
				}
				if len(args) > 0 {
					return usagef("`%s` takes no arguments, got %s: give values with their flags (run `%s --help` for them)",
						cmd.CommandPath(), quote(args[0]), cmd.CommandPath())
				}
				return usagef("%v; run `%s --help`", err, cmd.CommandPath())
			}
		case c.HasSubCommands() && c.Run == nil && c.RunE == nil:
			c.Args = func(cmd *cobra.Command, args []string) error {
				if len(args) == 0 {
					return nil
				}
				hint := ""
				if cmd.SuggestionsMinimumDistance <= 0 {
					cmd.SuggestionsMinimumDistance = 2
				}
				if s := cmd.SuggestionsFor(args[0]); len(s) > 0 {
					hint = fmt.Sprintf(" (did you mean %s?)", strings.Join(s, " or "))
				}
				return usagef("unknown command %s for `%s`%s; run `%s --help` for its commands",
					quote(args[0]), cmd.CommandPath(), hint, cmd.CommandPath())
			}
			c.RunE = func(cmd *cobra.Command, _ []string) error { return cmd.Help() }
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
}

// checkAddrFlag checks a host:port flag value before connecting.
func checkAddrFlag(flag, addr string) error {
	if _, _, err := metadata.ParseAddr(addr); err != nil {
		return usagef("%s %s is not host:port with a port from 1 to 65535 (for example 10.0.0.5:5432)", flag, quote(addr))
	}
	return nil
}

// checkListen checks the daemon's --listen syntax before connecting; whether
// the address can be bound is known only when the daemon binds it.
func checkListen(addr string) error {
	_, port, err := net.SplitHostPort(addr)
	if err == nil {
		var p int
		p, err = strconv.Atoi(port)
		if err == nil && (p < 0 || p > 65535) {
			err = errors.New("port out of range")
		}
	}
	if err != nil {
		return usagef("--listen %s is not host:port with a port from 0 to 65535 (for example 127.0.0.1:9187 or :9187)", quote(addr))
	}
	return nil
}

// checkConninfo checks, before connecting, that --node-conninfo merged with
// the coordinator's settings still makes a valid connection string (what
// connections to other nodes will use). Errors in the coordinator's own
// string are left to metadata.Open, which reports them before connecting
// too. Neither the string nor a password is ever printed: only the parser's
// reason.
func checkConninfo(coordinator, nodeConninfo string) error {
	if strings.TrimSpace(nodeConninfo) == "" {
		return nil
	}
	over, err := metadata.ParseConnString(nodeConninfo)
	if err != nil {
		return usagef("--node-conninfo is not valid: %s; write it as key=value pairs such as 'sslmode=require user=mover'", message(err))
	}
	coord, err := metadata.ParseConnString(coordinator)
	if err != nil {
		return nil
	}
	if _, err := pgconn.ParseConfig(coord.String()); err != nil {
		return nil
	}
	if _, err := pgconn.ParseConfig(coord.Merge(over).String()); err != nil {
		return usagef("--node-conninfo is not valid: %s; fix or remove the parameter it names", parserReason(err))
	}
	return nil
}

// parserReason is the last part of a pgconn parse error: the reason, without
// the connection string pgconn quotes before it.
func parserReason(err error) string {
	msg := err.Error()
	if i := strings.LastIndex(msg, ": "); i >= 0 {
		msg = msg[i+2:]
	}
	if strings.Contains(msg, "password") || strings.Contains(msg, "=") {
		return "a parameter has a value PostgreSQL does not accept"
	}
	return msg
}

// quote quotes a value the user gave for an error message, unless it may be
// a connection string or hold a secret: those are never printed.
func quote(s string) string {
	l := strings.ToLower(s)
	if strings.Contains(l, "password") || strings.Contains(s, "=") || strings.Contains(s, "://") || strings.Contains(s, "@") {
		return "[a connection string, not shown]"
	}
	if len(s) > 80 {
		s = s[:80] + "..."
	}
	return strconv.Quote(s)
}

// scrub is the last guard on the one line main prints: every password of the
// connection strings shardmover was given (flags and environment), and each
// of those strings whole, is replaced, whatever produced the message.
func scrub(msg string, g *globals) string {
	var dsns []string
	if g != nil {
		dsns = append(dsns, g.coordinator, g.nodeConninfo)
	}
	dsns = append(dsns, os.Getenv("SHARDMOVER_COORDINATOR"))
	secrets := []string{os.Getenv("PGPASSWORD")}
	for _, d := range dsns {
		if strings.TrimSpace(d) == "" {
			continue
		}
		if len(d) >= 8 {
			msg = strings.ReplaceAll(msg, d, "(connection string not shown)")
		}
		if cs, err := metadata.ParseConnString(d); err == nil {
			secrets = append(secrets, cs["password"])
		}
	}
	for _, p := range secrets {
		if len(p) >= 4 {
			msg = strings.ReplaceAll(msg, p, "xxxxx")
		}
	}
	return msg
}
