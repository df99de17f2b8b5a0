package handlers

import (
	"net/http"
	"net/url"
	"strings"
	"unicode"

	"github.com/labstack/echo/v4"

	"github.com/bgjobs/bgjobs"
	"github.com/bgjobs/bgjobs/handlers/console"
	"github.com/bgjobs/bgjobs/handlers/internal/keys"
	"github.com/bgjobs/bgjobs/tasks"
	"github.com/bgjobs/bgjobs/web"
)

// signInCookie carries a console sign-in's token, never the key it was
// made with: HttpOnly (no script reads it) and SameSite=Strict (no other
// site sends it). Signing out ends the token on the server, and revoking
// the key ends every sign-in made with it.
const signInCookie = "bgjobs_session"

// pageCaller is the console's view of the caller.
func pageCaller(c echo.Context) (string, bool) {
	who, _ := c.Get(callerKey).(caller)
	return who.Agent, who.Admin
}

// securityHeaders sets the console's headers on every page and asset.
func securityHeaders(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		web.SecurityHeaders(c.Response().Header())
		return next(c)
	}
}

// pageAuth admits a console request by its Authorization header or its
// sign-in cookie; anyone else is sent to the sign-in page.
func (a *authenticator) pageAuth(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		if a.Open(c.Request().Context()) {
			setCaller(c, caller{Agent: OpenAgent, Admin: true})
			return next(c)
		}
		who, _, ok, err := a.callerOf(c)
		if err != nil {
			return err
		}
		if !ok {
			if strings.HasPrefix(c.Request().URL.Path, "/monitoring") && c.Request().Header.Get("Authorization") != "" {
				return bgjobs.Errorf(bgjobs.EUnauthenticated, "the dashboard needs the admin key")
			}
			return c.Redirect(http.StatusSeeOther, "/login?next="+url.QueryEscape(c.Request().URL.Path))
		}
		if as := c.QueryParam("agent"); as != "" && who.Admin && bgjobs.ValidAgentName(as) {
			who.Agent = as
		}
		setCaller(c, who)
		return next(c)
	}
}

func handleLoginPage() echo.HandlerFunc {
	return func(c echo.Context) error {
		return console.Render(c, "login", console.Page{Title: "Sign in", Next: localPath(c.QueryParam("next"))})
	}
}

func handleLogin(a *authenticator) echo.HandlerFunc {
	return func(c echo.Context) error {
		if fromAnotherSite(c.Request()) {
			return errAnotherSite
		}
		key := strings.TrimSpace(c.FormValue("key"))
		who, ok, err := a.Lookup(c.Request().Context(), key)
		if err != nil {
			return err
		}
		if !ok {
			c.Response().WriteHeader(http.StatusUnauthorized)
			return web.Render(c.Response(), "login", console.Page{Title: "Sign in", Error: "Unknown key.", Next: localPath(c.QueryParam("next"))})
		}
		token, err := a.m.OpenSignIn(c.Request().Context(), tasks.SignIn{Agent: who.Agent, Admin: who.Admin, KeyDigest: keys.Digest(key)})
		if err != nil {
			return err
		}
		c.SetCookie(&http.Cookie{Name: signInCookie, Value: token, Path: "/", HttpOnly: true, SameSite: http.SameSiteStrictMode,
			Secure: c.Scheme() == "https", MaxAge: int(a.m.SignInTTL().Seconds())})
		return c.Redirect(http.StatusSeeOther, localPath(c.QueryParam("next")))
	}
}

// handleLogout ends the sign-in on the server, so a copy of its cookie
// signs nobody in, and clears the cookie.
func handleLogout(a *authenticator) echo.HandlerFunc {
	return func(c echo.Context) error {
		if fromAnotherSite(c.Request()) {
			return errAnotherSite
		}
		if ck, err := c.Cookie(signInCookie); err == nil && ck.Value != "" {
			if err := a.m.CloseSignIn(c.Request().Context(), ck.Value); err != nil {
				return err
			}
		}
		c.SetCookie(&http.Cookie{Name: signInCookie, Value: "", Path: "/", HttpOnly: true, SameSite: http.SameSiteStrictMode, MaxAge: -1})
		return c.Redirect(http.StatusSeeOther, "/login")
	}
}

// fromAnotherSite tells a sign-in or sign-out form posted from another
// site's page: one would sign the browser in with a key that site chose,
// so that what the user then does in the console (a memory search, a job
// they look at) happens under that site's agent; the other would sign the
// user out. Browsers say where a request comes from in Sec-Fetch-Site
// (every current one); an older one sends Origin with every POST, though
// as "null" under the console's no-referrer policy even from its own page,
// so "null" tells nothing. A request with neither comes from no browser,
// so no page can have sent it.
func fromAnotherSite(r *http.Request) bool {
	if site := r.Header.Get("Sec-Fetch-Site"); site != "" {
		return site != "same-origin" && site != "none"
	}
	origin := r.Header.Get("Origin")
	return origin != "" && origin != "null" && !console.SameOrigin(r)
}

var errAnotherSite = bgjobs.Errorf(bgjobs.EForbidden, "sign-in and sign-out are taken only from this server's own pages")

// localPath returns next when it is a path on this server, else "/": where
// sign-in sends the browser must never be another site. Browsers read
// "/\evil.example" and "/<tab>/evil.example" as "//evil.example", another
// host, so a backslash or a control character anywhere refuses next, as
// does anything with a scheme or a host.
func localPath(next string) string {
	if !strings.HasPrefix(next, "/") || strings.HasPrefix(next, "//") || strings.ContainsRune(next, '\\') ||
		strings.ContainsFunc(next, unicode.IsControl) {
		return "/"
	}
	if u, err := url.Parse(next); err != nil || u.Scheme != "" || u.Host != "" || u.User != nil {
		return "/"
	}
	return next
}
