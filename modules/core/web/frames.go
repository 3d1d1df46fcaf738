package web

import "github.com/gin-gonic/gin"

// NoFraming keeps a response out of other sites' frames (clickjacking):
// X-Frame-Options: DENY for older browsers and a Content-Security-Policy of
// frame-ancestors 'none'. It goes before authentication, so that a 401 or
// 429 carries it too; a handler that sets a fuller policy of its own (the
// console's) replaces the header and must keep frame-ancestors 'none' in it.
func NoFraming(c *gin.Context) {
	h := c.Writer.Header()
	h.Set("X-Frame-Options", "DENY")
	h.Set("Content-Security-Policy", "frame-ancestors 'none'")
	c.Next()
}
