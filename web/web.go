// Package web is the admin page for the browser: its handlers, sessions,
// forms, and the HTML templates and static assets they use. The templates
// and assets are embedded in the binary, so the page needs no files beside
// it and makes no request outside the service: it works offline.
//
// It imports policy and nothing else of this module, neither api nor db:
// it talks to the policy.Service alone, checks the admin token through the
// policy.AdminGate the JSON API checks it with, and keeps its sessions in a
// policy.SessionStore. main mounts it on the JSON API's Echo instance
// (Admin.Register given to api.Config.Pages), behind the API's middleware.
package web

import (
	"embed"
	"html/template"
	"io/fs"
)

//go:embed templates/*.html static/*
var files embed.FS

// Templates holds one template per admin page, named after its file without
// the extension ("login", "tiers", "tier", "delete", "usage", "key",
// "accounts", "account", "prices", "error"), plus the shared "head", "foot" and
// "fields". Each page template takes the page's view model; html/template
// escapes everything it prints. It is safe for concurrent use.
var Templates = template.Must(template.ParseFS(files, "templates/*.html"))

// Static holds the stylesheet and the icon, served under /admin/static/.
var Static fs.FS

func init() {
	var err error
	if Static, err = fs.Sub(files, "static"); err != nil {
		panic(err) // the embed pattern above guarantees the directory
	}
}
