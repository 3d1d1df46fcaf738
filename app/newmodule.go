package app

import (
	"bytes"
	"context"
	"embed"
	"errors"
	"fmt"
	"go/ast"
	"go/format"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"text/template"

	"github.com/spf13/cobra"
)

// hookledgerModule is the module path of a hookledger checkout's go.mod.
const hookledgerModule = "github.com/hookledger/hookledger"

//go:embed scaffold/*.tmpl
var scaffoldFS embed.FS

// triggerGo is where the modules' samples are listed (moduleSamples).
const triggerGo = "app/trigger.go"

// workingDirKey is the context key of the directory `new` runs in when
// not the process's own (tests run in a copy of the checkout, in
// parallel).
type workingDirKey struct{}

// workingDir is the directory `new` writes around.
func workingDir(ctx context.Context) (string, error) {
	if dir, ok := ctx.Value(workingDirKey{}).(string); ok {
		return dir, nil
	}
	return os.Getwd()
}

// NewModuleCommand is "new module NAME", the scaffold of a feature module.
// It is a development tool: hookledger-dev has it, hookledger does not.
func NewModuleCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "new module",
		Short: "Scaffold code in a hookledger checkout",
		Args:  cobra.ArbitraryArgs,
		RunE:  groupRun,
	}
	cmd.AddCommand(newModuleCommand())
	return cmd
}

func newModuleCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "module NAME",
		Short: "Scaffold a feature module: its package, test, samples, ent schema and registration",
		Long: `Write a feature module named NAME into the hookledger checkout around the
working directory, ready for go tool task generate -- NAME:

  modules/features/NAME/doc.go        what the module owns
  modules/features/NAME/NAME.go       Register: a handler of Stripe's NAME.updated
                                      events on the staged-write API, its merge
                                      rule and its one-statement flush
  modules/features/NAME/NAME_test.go  ledgertest.Conformance on a few events
  modules/features/NAME/samples.go    Samples: the bodies trigger sends
  modules/features/NAME/samples/stripe/NAME.updated.json
                                      a Stripe NAME.updated event to send
  ent/schema/NAME.go                  the NAME table, keyed by namespace

its registration line in app/app.go, after the last module's, and its
samples' line in app/trigger.go (go tool task trigger -- NAME.updated
sends one). NAME is
a lowercase Go identifier (letters and digits) that names no existing
module, table or identifier of package app. On any error nothing is
written. See docs/modules.md.`,
		Args: exactArgs(1, "a module name"),
		RunE: func(cmd *cobra.Command, args []string) error {
			wd, err := workingDir(cmd.Context())
			if err != nil {
				return err
			}
			root, err := checkoutRoot(wd)
			if err != nil {
				return err
			}
			plan, err := planModule(root, args[0])
			if err != nil {
				return err
			}
			if err := plan.write(); err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			for _, f := range plan.files {
				fmt.Fprintf(out, "wrote %s\n", f.rel)
			}
			fmt.Fprintf(out, "registered %s in app/app.go and its samples in %s\n", plan.name, triggerGo)
			fmt.Fprintln(out, "next, from", root+":")
			fmt.Fprintf(out, "  go tool task generate -- %s\n", plan.name)
			fmt.Fprintf(out, "  go test ./modules/features/%s ./app\n", plan.name)
			fmt.Fprintf(out, "then, with go tool task dev running:\n  go tool task trigger -- %s\n", plan.name+".updated")
			return nil
		},
	}
}

// checkoutRoot is the folder of the go.mod of hookledger's module at or
// above dir.
func checkoutRoot(dir string) (string, error) {
	for d := dir; ; d = filepath.Dir(d) {
		raw, err := os.ReadFile(filepath.Join(d, "go.mod"))
		if err == nil {
			if m := goModModule(raw); m != hookledgerModule {
				return "", fmt.Errorf("%s is module %q, not %s: run hookledger-dev new in a hookledger checkout",
					filepath.Join(d, "go.mod"), m, hookledgerModule)
			}
			return d, nil
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return "", err
		}
		if filepath.Dir(d) == d {
			return "", fmt.Errorf("no go.mod of %s in %s or above: run hookledger-dev new in a hookledger checkout", hookledgerModule, dir)
		}
	}
}

// goModModule is the module path a go.mod declares.
func goModModule(raw []byte) string {
	for _, line := range strings.Split(string(raw), "\n") {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "module"); ok && (rest == "" || rest[0] == ' ' || rest[0] == '\t') {
			if m, err := strconv.Unquote(strings.TrimSpace(rest)); err == nil {
				return m
			}
			return strings.TrimSpace(rest)
		}
	}
	return ""
}

// scaffold is what the templates are filled with.
type scaffold struct {
	// Name is the module's package and folder; Table its table, Type its
	// ent schema type.
	Name, Table, Type string
	// EventType is the Stripe event type the module's sample handler
	// applies.
	EventType string
}

// modulePlan is a module's files and app.go's new text, made in memory
// before anything is written.
type modulePlan struct {
	name, root string
	// dir is the module's folder, made by write.
	dir   string
	files []plannedFile
	// edits are app/app.go with the module's registration and
	// app/trigger.go with its samples' line.
	edits []plannedEdit
}

// plannedEdit is a file of the checkout, as read when planned (old) and
// as it is to be written (new).
type plannedEdit struct {
	path     string
	old, new []byte
}

type plannedFile struct {
	rel, path string
	text      []byte
}

var moduleName = regexp.MustCompile(`^[a-z][a-z0-9]*$`)

// planModule checks name and renders the module's files and app.go's new
// text; it writes nothing. A name that cannot be used is a usage error.
func planModule(root, name string) (*modulePlan, error) {
	if !moduleName.MatchString(name) {
		return nil, usageError("module name %q: want a lowercase Go identifier of letters and digits, starting with a letter (e.g. invoice)", name)
	}
	if reason := reservedName(name); reason != "" {
		return nil, usageError("module name %q %s: pick another", name, reason)
	}
	s := scaffold{Name: name, Table: name, Type: strings.ToUpper(name[:1]) + name[1:], EventType: name + ".updated"}
	if err := checkTaken(root, s); err != nil {
		return nil, err
	}
	p := &modulePlan{name: name, root: root, dir: filepath.Join(root, "modules", "features", name)}
	for _, f := range []struct{ tmpl, rel string }{
		{"doc.go.tmpl", "modules/features/" + name + "/doc.go"},
		{"module.go.tmpl", "modules/features/" + name + "/" + name + ".go"},
		{"module_test.go.tmpl", "modules/features/" + name + "/" + name + "_test.go"},
		{"samples.go.tmpl", "modules/features/" + name + "/samples.go"},
		{"sample.json.tmpl", "modules/features/" + name + "/samples/stripe/" + s.EventType + ".json"},
		{"schema.go.tmpl", "ent/schema/" + name + ".go"},
	} {
		text, err := renderScaffold(f.tmpl, s)
		if err != nil {
			return nil, err
		}
		p.files = append(p.files, plannedFile{rel: f.rel, path: filepath.Join(root, filepath.FromSlash(f.rel)), text: text})
	}
	for _, e := range []struct {
		rel string
		add func([]byte, string) ([]byte, error)
	}{{"app/app.go", registerIn}, {triggerGo, samplesIn}} {
		path := filepath.Join(root, filepath.FromSlash(e.rel))
		old, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("read the modules' registrations: %w", err)
		}
		text, err := e.add(old, name)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", e.rel, err)
		}
		p.edits = append(p.edits, plannedEdit{path: path, old: old, new: text})
	}
	return p, nil
}

// renderScaffold fills a template and formats the Go it makes.
func renderScaffold(name string, s scaffold) ([]byte, error) {
	t, err := template.ParseFS(scaffoldFS, "scaffold/"+name)
	if err != nil {
		return nil, err
	}
	var b bytes.Buffer
	if err := t.Execute(&b, s); err != nil {
		return nil, err
	}
	if !strings.HasSuffix(name, ".go.tmpl") {
		return b.Bytes(), nil
	}
	out, err := format.Source(b.Bytes())
	if err != nil {
		return nil, fmt.Errorf("scaffold %s: %w", name, err)
	}
	return out, nil
}

// reservedName says why name cannot name a module whatever the checkout
// holds, or "".
func reservedName(name string) string {
	switch {
	case token.Lookup(name).IsKeyword():
		return "is a Go keyword"
	case slices.Contains(goPredeclared, name):
		return "is a Go predeclared identifier"
	case slices.Contains(postgresReserved, name):
		return "is a reserved word of PostgreSQL, and the module's table is named after it"
	case slices.Contains(entReserved, name) || slices.Contains(entReserved, strings.ToUpper(name[:1])+name[1:]):
		return "is an identifier ent's generated code reserves"
	case slices.Contains(scaffoldIdents, name):
		return "is an identifier the scaffold's code uses"
	}
	return ""
}

var (
	goPredeclared = []string{
		"any", "bool", "byte", "comparable", "complex64", "complex128", "error", "float32", "float64",
		"int", "int8", "int16", "int32", "int64", "rune", "string", "uint", "uint8", "uint16", "uint32",
		"uint64", "uintptr", "true", "false", "iota", "nil", "append", "cap", "clear", "close", "complex",
		"copy", "delete", "imag", "len", "make", "max", "min", "new", "panic", "print", "println", "real",
		"recover",
		// Folders and package names the go command treats apart.
		"main", "internal", "vendor", "testdata",
	}
	// postgresReserved are the key words PostgreSQL does not take as a
	// table name (pg_get_keywords() of category R and T).
	postgresReserved = strings.Fields(`all analyse analyze and any array as asc asymmetric authorization
		binary both case cast check collate collation column concurrently constraint create cross
		current_catalog current_date current_role current_schema current_time current_timestamp
		current_user default deferrable desc distinct do else end except false fetch for foreign
		freeze from full grant group having ilike in initially inner intersect into is isnull join
		lateral leading left like limit localtime localtimestamp natural not notnull null offset on
		only or order outer overlaps placing primary references returning right select session_user
		similar some symmetric table tablesample then to trailing true union unique user using
		variadic verbose when where window with`)
	// entReserved are the names ent's code generator refuses for a schema
	// type, and the packages it generates beside the schemas'.
	entReserved = []string{
		"AggregateFunc", "As", "Asc", "Client", "config", "Count", "Debug", "Desc", "Driver", "Hook",
		"Interceptor", "Log", "MutateFunc", "Mutation", "Mutator", "Op", "Option", "OrderFunc", "Max",
		"Mean", "Min", "Schema", "Sum", "Policy", "Query", "Value",
		"ent", "enttest", "entql", "hook", "intercept", "migrate", "predicate", "privacy", "runtime", "schema",
	}
	// scaffoldIdents are the names the module's test file declares or
	// imports beside the module's package.
	scaffoldIdents = []string{"fmt", "testing", "require", "ledger", "ledgertest", "sample", "t", "h"}
)

// checkTaken is a usage error when the checkout already has a module, a
// table, an ent type or an identifier of package app by s's names.
func checkTaken(root string, s scaffold) error {
	for _, rel := range []string{
		"modules/features/" + s.Name, "modules/core/" + s.Name, "modules/operations/" + s.Name,
		"modules/testsupport/" + s.Name, "ent/schema/" + s.Name + ".go", "ent/" + s.Name, "ent/" + s.Name + ".go",
	} {
		if _, err := os.Lstat(filepath.Join(root, filepath.FromSlash(rel))); err == nil {
			return usageError("%s already exists: module %q is taken", rel, s.Name)
		} else if !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	tables, types, err := schemaNames(filepath.Join(root, "ent", "schema"))
	if err != nil {
		return err
	}
	for _, typ := range types {
		if strings.EqualFold(typ, s.Type) {
			return usageError("ent/schema already declares %s, whose ent package is %s: module %q is taken", typ, strings.ToLower(typ), s.Name)
		}
	}
	more, err := migrationTables(filepath.Join(root, "migrations"))
	if err != nil {
		return err
	}
	if slices.Contains(append(tables, more...), s.Table) {
		return usageError("table %s already exists: module %q is taken", s.Table, s.Name)
	}
	idents, err := packageIdents(filepath.Join(root, "app"), "app")
	if err != nil {
		return err
	}
	if slices.Contains(idents, s.Name) {
		return usageError("package app already uses the name %s, which app/app.go would import the module as: pick another", s.Name)
	}
	return nil
}

var (
	entTable    = regexp.MustCompile(`entsql\.Table\("([^"]+)"\)`)
	schemaType  = regexp.MustCompile(`(?m)^type\s+(\w+)\s+struct`)
	createTable = regexp.MustCompile(`(?i)CREATE\s+(?:UNLOGGED\s+)?TABLE\s+(?:IF\s+NOT\s+EXISTS\s+)?(?:"?public"?\.)?"?(\w+)"?`)
)

// schemaNames are the tables the ent schemas name and the types they
// declare.
func schemaNames(dir string) (tables, types []string, err error) {
	paths, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		return nil, nil, err
	}
	for _, p := range paths {
		raw, err := os.ReadFile(p)
		if err != nil {
			return nil, nil, err
		}
		for _, m := range entTable.FindAllSubmatch(raw, -1) {
			tables = append(tables, string(m[1]))
		}
		for _, m := range schemaType.FindAllSubmatch(raw, -1) {
			types = append(types, string(m[1]))
		}
	}
	return tables, types, nil
}

// migrationTables are the tables the up migrations create.
func migrationTables(dir string) ([]string, error) {
	paths, err := filepath.Glob(filepath.Join(dir, "*.up.sql"))
	if err != nil {
		return nil, err
	}
	var out []string
	for _, p := range paths {
		raw, err := os.ReadFile(p)
		if err != nil {
			return nil, err
		}
		for _, m := range createTable.FindAllSubmatch(raw, -1) {
			out = append(out, strings.ToLower(string(m[1])))
		}
	}
	return out, nil
}

// packageIdents are the package-scope names of package pkg in dir (its
// internal tests included) and the names its files import.
func packageIdents(dir, pkg string) ([]string, error) {
	paths, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		return nil, err
	}
	var out []string
	fset := token.NewFileSet()
	for _, p := range paths {
		f, err := parser.ParseFile(fset, p, nil, parser.SkipObjectResolution)
		if err != nil {
			return nil, fmt.Errorf("read package %s: %w", pkg, err)
		}
		if f.Name.Name != pkg {
			continue
		}
		for _, imp := range f.Imports {
			out = append(out, importName(imp))
		}
		for _, d := range f.Decls {
			switch d := d.(type) {
			case *ast.FuncDecl:
				if d.Recv == nil {
					out = append(out, d.Name.Name)
				}
			case *ast.GenDecl:
				for _, spec := range d.Specs {
					switch spec := spec.(type) {
					case *ast.TypeSpec:
						out = append(out, spec.Name.Name)
					case *ast.ValueSpec:
						for _, n := range spec.Names {
							out = append(out, n.Name)
						}
					}
				}
			}
		}
	}
	return out, nil
}

// importName is the name an import declares: its alias, else the last
// element of its path (hookledger's packages are named after their
// folders).
func importName(imp *ast.ImportSpec) string {
	if imp.Name != nil {
		return imp.Name.Name
	}
	p, _ := strconv.Unquote(imp.Path.Value)
	return p[strings.LastIndex(p, "/")+1:]
}

// registerIn adds name's registration to app.go's text: its import beside
// the other feature modules', and name.Register(<registry>) on the line
// after the last statement of a function body that registers a feature
// module into the registry the same way (X.Register(a.registry...)).
func registerIn(src []byte, name string) ([]byte, error) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "app.go", src, parser.ParseComments|parser.SkipObjectResolution)
	if err != nil {
		return nil, err
	}
	const features = hookledgerModule + "/modules/features/"
	modules := map[string]bool{}
	var lastImport *ast.ImportSpec
	for _, imp := range f.Imports {
		p, _ := strconv.Unquote(imp.Path.Value)
		if p == features+name {
			return nil, usageError("module %q is already imported", name)
		}
		if strings.HasPrefix(p, features) {
			modules[importName(imp)] = true
			lastImport = imp
		}
	}
	var (
		anchor   ast.Stmt
		registry string
	)
	for _, d := range f.Decls {
		fn, ok := d.(*ast.FuncDecl)
		if !ok || fn.Body == nil {
			continue
		}
		for _, st := range fn.Body.List {
			if reg, ok := moduleRegistration(st, modules, src, fset); ok {
				anchor, registry = st, reg
			}
		}
	}
	if anchor == nil || lastImport == nil {
		return nil, errors.New("found no feature module's registration (X.Register(a.registry...)) to add the new module's after")
	}
	// Insert from the end of the file backwards, so offsets hold.
	stmtEnd := lineEnd(src, fset.Position(anchor.End()).Offset)
	call := indentOf(src, fset.Position(anchor.Pos()).Offset) + name + ".Register(" + registry + ")\n"
	importEnd := lineEnd(src, fset.Position(lastImport.End()).Offset)
	imp := indentOf(src, fset.Position(lastImport.Pos()).Offset) + strconv.Quote(features+name) + "\n"
	var out []byte
	out = append(out, src[:importEnd]...)
	out = append(out, imp...)
	out = append(out, src[importEnd:stmtEnd]...)
	out = append(out, call...)
	out = append(out, src[stmtEnd:]...)
	formatted, err := format.Source(out)
	if err != nil {
		return nil, fmt.Errorf("add the registration: %w", err)
	}
	return formatted, nil
}

// samplesIn adds name's samples to trigger.go's text: its import beside
// the other feature modules' and "name": name.Samples as the last entry
// of moduleSamples.
func samplesIn(src []byte, name string) ([]byte, error) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "trigger.go", src, parser.ParseComments|parser.SkipObjectResolution)
	if err != nil {
		return nil, err
	}
	const features = hookledgerModule + "/modules/features/"
	var lastImport *ast.ImportSpec
	for _, imp := range f.Imports {
		p, _ := strconv.Unquote(imp.Path.Value)
		if strings.HasPrefix(p, features) {
			lastImport = imp
		}
	}
	var list *ast.CompositeLit
	ast.Inspect(f, func(n ast.Node) bool {
		if vs, ok := n.(*ast.ValueSpec); ok && len(vs.Names) == 1 && vs.Names[0].Name == "moduleSamples" && len(vs.Values) == 1 {
			list, _ = vs.Values[0].(*ast.CompositeLit)
		}
		return list == nil
	})
	if list == nil || lastImport == nil {
		return nil, errors.New("found no list of the modules' samples (var moduleSamples = map[string]func() fs.FS{...}) to add the new module's to")
	}
	closing := fset.Position(list.Rbrace).Offset
	entry := "\t" + strconv.Quote(name) + ": " + name + ".Samples,\n"
	importEnd := lineEnd(src, fset.Position(lastImport.End()).Offset)
	imp := indentOf(src, fset.Position(lastImport.Pos()).Offset) + strconv.Quote(features+name) + "\n"
	var out []byte
	out = append(out, src[:importEnd]...)
	out = append(out, imp...)
	out = append(out, src[importEnd:closing]...)
	out = append(out, entry...)
	out = append(out, src[closing:]...)
	formatted, err := format.Source(out)
	if err != nil {
		return nil, fmt.Errorf("add the samples: %w", err)
	}
	return formatted, nil
}

// moduleRegistration reports whether st is X.Register(R, ...) for a
// feature module X and a registry R named like <ident>.registry, and
// returns R's text.
func moduleRegistration(st ast.Stmt, modules map[string]bool, src []byte, fset *token.FileSet) (string, bool) {
	es, ok := st.(*ast.ExprStmt)
	if !ok {
		return "", false
	}
	call, ok := es.X.(*ast.CallExpr)
	if !ok || len(call.Args) == 0 {
		return "", false
	}
	sel, ok := call.Fun.(*ast.SelectorExpr)
	if !ok || sel.Sel.Name != "Register" {
		return "", false
	}
	pkg, ok := sel.X.(*ast.Ident)
	if !ok || !modules[pkg.Name] {
		return "", false
	}
	reg, ok := call.Args[0].(*ast.SelectorExpr)
	if !ok || reg.Sel.Name != "registry" {
		return "", false
	}
	if _, ok := reg.X.(*ast.Ident); !ok {
		return "", false
	}
	return string(src[fset.Position(reg.Pos()).Offset:fset.Position(reg.End()).Offset]), true
}

// lineEnd is the offset just past the newline that ends the line holding
// offset at (or len(src)).
func lineEnd(src []byte, at int) int {
	if i := bytes.IndexByte(src[at:], '\n'); i >= 0 {
		return at + i + 1
	}
	return len(src)
}

// indentOf is the leading white space of the line holding offset at.
func indentOf(src []byte, at int) string {
	start := bytes.LastIndexByte(src[:at], '\n') + 1
	end := start
	for end < len(src) && (src[end] == ' ' || src[end] == '\t') {
		end++
	}
	return string(src[start:end])
}

// write writes the planned files, each only where nothing is, and then
// the edited files, when they still read as planned. On an error it
// removes what it wrote and leaves the edited files as they were.
func (p *modulePlan) write() (err error) {
	var written []string
	var edited []plannedEdit
	madeDir := false
	defer func() {
		if err == nil {
			return
		}
		for _, e := range edited {
			_ = replaceFile(e.path, e.old)
		}
		for _, path := range slices.Backward(written) {
			os.Remove(path)
		}
		if madeDir {
			os.RemoveAll(p.dir)
		}
	}()
	if err := os.Mkdir(p.dir, 0o755); err != nil {
		return fmt.Errorf("make the module's folder: %w", err)
	}
	madeDir = true
	for _, f := range p.files {
		if err := os.MkdirAll(filepath.Dir(f.path), 0o755); err != nil {
			return err
		}
		if err := writeNew(f.path, f.text); err != nil {
			return err
		}
		written = append(written, f.path)
	}
	for _, e := range p.edits {
		current, err := os.ReadFile(e.path)
		if err != nil {
			return err
		}
		if !bytes.Equal(current, e.old) {
			return fmt.Errorf("%s changed while the module was made: run hookledger-dev new module %s again", e.path, p.name)
		}
	}
	for _, e := range p.edits {
		if err := replaceFile(e.path, e.new); err != nil {
			return err
		}
		edited = append(edited, e)
	}
	return nil
}

// replaceFile replaces path's content with text at once (a rename),
// keeping its mode.
func replaceFile(path string, text []byte) error {
	info, err := os.Stat(path)
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(text); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Chmod(info.Mode().Perm()); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// writeNew writes a file that must not exist yet.
func writeNew(path string, text []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.Write(text); err != nil {
		f.Close()
		os.Remove(path)
		return err
	}
	if err := f.Close(); err != nil {
		os.Remove(path)
		return err
	}
	return nil
}
