package console

import (
	"net/http"
	"strconv"
	"strings"

	"github.com/gin-gonic/gin"
)

// Sessions logs a browser in with the admin token (a session cookie the
// console, River UI and its API accept) and out again.
type Sessions interface {
	// Login sets the session cookie when token is right and answers 200;
	// else 401, 403 for another site's request, or 429 with the seconds
	// to wait.
	Login(w http.ResponseWriter, r *http.Request, clientIP, token string) (status, retryAfter int)
	Logout(w http.ResponseWriter, r *http.Request)
}

// loginData is what the login page shows.
type loginData struct {
	// Next is where a successful login goes.
	Next  string
	Error string
}

// nextPage is where a login goes: a page of the console or River UI that
// next names, else the overview. Nothing else, so a link cannot send a
// logged-in operator to another site.
func nextPage(next string) string {
	if strings.HasPrefix(next, "//") || strings.Contains(next, `\`) ||
		!strings.HasPrefix(next, "/console/") && !strings.HasPrefix(next, "/riverui/") {
		return "/console/"
	}
	return next
}

func (h *handler) loginPage(c *gin.Context) {
	h.render(c, "login", "Log in", loginData{Next: nextPage(c.Query("next"))})
}

// login checks the form's token and sets the session cookie, then goes
// to the page asked for; a wrong token shows the form again (401, 429
// with Retry-After once the address spent its tries, 403 from another
// site's page).
func (h *handler) login(c *gin.Context) {
	next := nextPage(c.PostForm("next"))
	status, retry := h.cfg.Sessions.Login(c.Writer, c.Request, c.ClientIP(), c.PostForm("token"))
	d := loginData{Next: next}
	switch status {
	case http.StatusOK:
		c.Redirect(http.StatusSeeOther, next)
		return
	case http.StatusTooManyRequests:
		c.Header("Retry-After", strconv.Itoa(retry))
		d.Error = "Too many wrong tokens from this address: try again in " + strconv.Itoa(retry) + " s."
	case http.StatusForbidden:
		d.Error = "Refused: the login form was sent from another site."
	default:
		d.Error = "Wrong token."
	}
	h.renderStatus(c, status, "login", "Log in", d)
}

// logout clears the session cookie and shows the login form. Basic
// credentials a browser keeps are not the console's to clear.
func (h *handler) logout(c *gin.Context) {
	h.cfg.Sessions.Logout(c.Writer, c.Request)
	c.Redirect(http.StatusSeeOther, "/console/login")
}
