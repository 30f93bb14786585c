#include "ccurl_shim.h"

CURLcode ccurl_easy_setopt_long(CURL *handle, CURLoption option, long value) { return curl_easy_setopt(handle, option, value); }
CURLcode ccurl_easy_setopt_off_t(CURL *handle, CURLoption option, curl_off_t value) { return curl_easy_setopt(handle, option, value); }
CURLcode ccurl_easy_setopt_string(CURL *handle, CURLoption option, const char *value) { return curl_easy_setopt(handle, option, value); }
CURLcode ccurl_easy_setopt_ptr(CURL *handle, CURLoption option, void *value) { return curl_easy_setopt(handle, option, value); }
CURLcode ccurl_easy_setopt_slist(CURL *handle, CURLoption option, struct curl_slist *value) { return curl_easy_setopt(handle, option, value); }
CURLcode ccurl_easy_setopt_data_cb(CURL *handle, CURLoption option, ccurl_data_cb callback) { return curl_easy_setopt(handle, option, callback); }
CURLcode ccurl_easy_setopt_opensocket_cb(CURL *handle, ccurl_opensocket_cb callback) { return curl_easy_setopt(handle, CURLOPT_OPENSOCKETFUNCTION, callback); }
CURLcode ccurl_easy_setopt_xferinfo_cb(CURL *handle, ccurl_xferinfo_cb callback) { return curl_easy_setopt(handle, CURLOPT_XFERINFOFUNCTION, callback); }
CURLcode ccurl_easy_setopt_prereq_cb(CURL *handle, ccurl_prereq_cb callback) { return curl_easy_setopt(handle, CURLOPT_PREREQFUNCTION, callback); }

CURLcode ccurl_easy_getinfo_long(CURL *handle, CURLINFO info, long *value) { return curl_easy_getinfo(handle, info, value); }
CURLcode ccurl_easy_getinfo_off_t(CURL *handle, CURLINFO info, curl_off_t *value) { return curl_easy_getinfo(handle, info, value); }
CURLcode ccurl_easy_getinfo_string(CURL *handle, CURLINFO info, const char **value) { return curl_easy_getinfo(handle, info, value); }
CURLcode ccurl_easy_getinfo_ptr(CURL *handle, CURLINFO info, void **value) { return curl_easy_getinfo(handle, info, value); }
CURLcode ccurl_easy_getinfo_socket(CURL *handle, CURLINFO info, curl_socket_t *value) { return curl_easy_getinfo(handle, info, value); }

CURLMcode ccurl_multi_setopt_long(CURLM *multi, CURLMoption option, long value) { return curl_multi_setopt(multi, option, value); }
CURLSHcode ccurl_share_setopt_long(CURLSH *share, CURLSHoption option, long value) { return curl_share_setopt(share, option, value); }
