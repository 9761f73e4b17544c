package api

import (
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"io/fs"
	"mime"
	"net/http"
	"path"
	"strings"

	"github.com/gin-gonic/gin"

	"github.com/dispatchhq/dispatch"
)

//go:embed console/index.html
var consoleIndex string

//go:embed all:console/static
var consoleFiles embed.FS

// ConsoleFiles are the console's static assets (for tests that read them).
var ConsoleFiles, _ = fs.Sub(consoleFiles, "console/static")

// consoleCSP allows nothing but this origin's own scripts, styles, images
// and API: no inline script or style, no other host, no framing.
const consoleCSP = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
	"connect-src 'self'; font-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"

// console serves the operator console from embedded assets. The
// static files live under a path named by a hash of their contents, so they
// are cached for a year and a new build is never served stale.
type console struct {
	static  fs.FS
	version string
	index   []byte
}

func newConsole() *console {
	static, err := fs.Sub(consoleFiles, "console/static")
	if err != nil {
		panic(err) // the embed pattern guarantees the folder
	}
	h := sha256.New()
	_ = fs.WalkDir(static, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := fs.ReadFile(static, p)
		h.Write([]byte(p))
		h.Write(b)
		return err
	})
	c := &console{static: static, version: hex.EncodeToString(h.Sum(nil))[:12]}
	// The page names its assets under {{.Static}}, their versioned path
	// (hex digits, nothing to escape). Not html/template: its reflection
	// (text/template looks methods up by name) makes the linker keep every
	// exported method of every type: a third of the binary, never run.
	c.index = []byte(strings.ReplaceAll(consoleIndex, "{{.Static}}", "/console/static/"+c.version))
	return c
}

func (cn *console) routes(e *gin.Engine) {
	e.GET("/console", func(c *gin.Context) { c.Redirect(http.StatusMovedPermanently, "/console/") })
	e.GET("/console/", cn.serveIndex)
	e.GET("/console/static/:version/*file", cn.serveStatic)
}

func securityHeaders(c *gin.Context) {
	h := c.Writer.Header()
	h.Set("Content-Security-Policy", consoleCSP)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Cross-Origin-Opener-Policy", "same-origin")
	h.Set("Cross-Origin-Resource-Policy", "same-origin")
}

func (cn *console) serveIndex(c *gin.Context) {
	securityHeaders(c)
	c.Header("Cache-Control", "no-cache")
	c.Data(http.StatusOK, "text/html; charset=utf-8", cn.index)
}

func (cn *console) serveStatic(c *gin.Context) {
	securityHeaders(c)
	name := strings.TrimPrefix(path.Clean(c.Param("file")), "/")
	b, err := fs.ReadFile(cn.static, name)
	if c.Param("version") != cn.version || err != nil {
		c.Abort()
		writeJSON(c, http.StatusNotFound, errorBody{Error: errorDetail{Code: dispatch.ENotFound, Message: "no such console file"}})
		return
	}
	ct := mime.TypeByExtension(path.Ext(name))
	if ct == "" {
		ct = "application/octet-stream"
	}
	c.Header("Cache-Control", "public, max-age=31536000, immutable")
	c.Data(http.StatusOK, ct, b)
}
