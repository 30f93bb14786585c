vcl 4.1;
# Varnish in front of the bench origin. Generated from bench/templates/varnish.vcl.
backend origin {{
    .host = "127.0.0.1";
    .port = "{origin_port}";
}}
sub vcl_backend_response {{
    # Like the other two: no serving stale unless the run asks for grace (--grace); keep expired objects (for
    # conditional requests, i.e. 304s) an hour.
    set beresp.grace = {grace}s;
    set beresp.keep = 1h;
}}
sub vcl_deliver {{
    if (obj.hits > 0) {{ set resp.http.X-Cache = "HIT"; }} else {{ set resp.http.X-Cache = "MISS"; }}
}}
