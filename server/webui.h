/*
 * server/webui.h - the web page's files, compiled into the daemon: a table
 * generated at build time by server/webui/embed.py from server/webui/, so
 * the page needs no network and no installed files at run time.
 */
#ifndef GS_SERVER_WEBUI_H
#define GS_SERVER_WEBUI_H

#include <stddef.h>

struct gs_srv_asset {
    const char *path; /* URL path: "/index.html", "/assets/app.js" */
    const char *type; /* Content-Type */
    const unsigned char *data;
    size_t len;
    const char *etag; /* a strong ETag, quotes included: a hash of data */
};

extern const struct gs_srv_asset gs_srv_assets[];
extern const size_t gs_srv_n_assets;

#endif /* GS_SERVER_WEBUI_H */
